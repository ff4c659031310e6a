//! The example binaries' command line, run as a user would: `--help` lists the operator's
//! options, a wrong flag is a usage error with exit code 2 and no operator started.

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_filters"))
        .args(args)
        .env_remove("KOPF_NAMESPACE")
        .output()
        .expect("the example binary runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_wrong_flag_is_a_usage_error_with_exit_code_2() {
    let (code, _, stderr) = run(&["--bogus"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("unexpected argument '--bogus'"), "{stderr}");
    assert!(!stderr.contains("the operator has started"), "{stderr}");
    let (code, _, stderr) = run(&["--leader-election", "no-namespace"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is not NAMESPACE/NAME"), "{stderr}");
}

#[test]
fn help_lists_the_operator_options_and_exits_0() {
    let (code, stdout, stderr) = run(&["--help"]);
    assert_eq!(code, Some(0), "{stderr}");
    for flag in [
        "--namespace",
        "--health",
        "--leader-election",
        "--sharding",
        "--install-crd",
    ] {
        assert!(stdout.contains(flag), "{flag} missing from:\n{stdout}");
    }
}
