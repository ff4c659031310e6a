//! `bench-object-bytes`: what one watched object costs in memory, and how that grows with the
//! object's size.
//!
//! ```text
//! KUBECONFIG=… bench-object-bytes            # the table (applies the CRD if missing)
//! bench-object-bytes hold ARM FILE N          # one measurement (run by the table)
//! ```
//!
//! For each shape below it creates one benchmark object (namespace `kopf-bench-bytes`), reads it
//! back as a watch delivers it (`managedFields` included), and runs itself once per shape and
//! arm to hold N copies (distinct names and UIDs) the way that arm keeps them:
//! - `kopf-rs`: an [`ObjectState`] as the supervisor keeps it, compacted (the JSON body without
//!   `managedFields`, as text), with the typed `KopfExample` a handler's `Arc<KopfExample>`
//!   decodes cached in it: the part of an object's cost that grows with its size. The fixed
//!   part (the supervisor's entry, the timer) is scenario 7's;
//! - `kube-store`: an `Arc<DynamicObject>`, as a kube-rs reflector store keeps it.
//!
//! It prints the growth of resident memory per copy, the texts having been made beforehand.

use std::path::Path;
use std::sync::Arc;

use kopf_bench::kubeutil;
use kopf_bench::procstat;
use kopf_examples::crd::KopfExample;
use kopf_runtime::engine::ObjectState;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

const NAMESPACE: &str = "kopf-bench-bytes";

/// The shapes: a name and the fields that make the object (over `metadata.name`).
fn shapes() -> Vec<(&'static str, Value)> {
    let text = |n: usize| "x".repeat(n);
    let items = |n: usize| (0..n).map(|i| format!("item-{i:011}")).collect::<Vec<_>>();
    let labels = |n: usize| {
        (0..n)
            .map(|i| (format!("label-{i:03}"), json!(format!("value-{i:03}"))))
            .collect::<serde_json::Map<_, _>>()
    };
    vec![
        (
            "small (the benchmarks')",
            json!({"spec": {"field": "value"}}),
        ),
        ("spec.field 1 KB", json!({"spec": {"field": text(1 << 10)}})),
        (
            "spec.field 16 KB",
            json!({"spec": {"field": text(16 << 10)}}),
        ),
        (
            "spec.field 64 KB",
            json!({"spec": {"field": text(64 << 10)}}),
        ),
        ("spec.items 100", json!({"spec": {"items": items(100)}})),
        ("spec.items 1 000", json!({"spec": {"items": items(1000)}})),
        (
            "50 labels",
            json!({"metadata": {"labels": labels(50)}, "spec": {}}),
        ),
        (
            "a 16 KB annotation",
            json!({"metadata": {"annotations": {"note": text(16 << 10)}}, "spec": {}}),
        ),
    ]
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        None => tokio::runtime::Runtime::new()?.block_on(table()),
        Some("hold") if args.len() == 5 => {
            let n: usize = args[4].parse()?;
            let per_object = hold(&args[2], Path::new(&args[3]), n)?;
            println!("{per_object}");
            Ok(())
        }
        _ => anyhow::bail!("usage: bench-object-bytes [hold kopf-rs|kube-store FILE N]"),
    }
}

/// Creates the objects, measures each shape in both arms, prints the table.
async fn table() -> anyhow::Result<()> {
    let client = kubeutil::client(Some(kubeutil::HARNESS_USER_AGENT)).await?;
    kubeutil::apply_crd_and_namespace(&client, NAMESPACE).await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, NAMESPACE, &kubeutil::api_resource());
    let dir = std::env::temp_dir().join(format!("kopf-bench-bytes-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!("| object | JSON as delivered | kopf-rs | kube-store |\n|---|---|---|---|");
    for (i, (shape, fields)) in shapes().into_iter().enumerate() {
        let name = format!("bytes-{i}");
        let mut obj = DynamicObject::new(&name, &kubeutil::api_resource()).within(NAMESPACE);
        obj.data = json!({"spec": fields["spec"]});
        if let Some(meta) = fields.get("metadata") {
            obj.metadata = serde_json::from_value(meta.clone())?;
            obj.metadata.name = Some(name.clone());
            obj.metadata.namespace = Some(NAMESPACE.into());
        }
        if api.get_opt(&name).await?.is_some() {
            api.delete(&name, &Default::default()).await?;
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
            while api.get_opt(&name).await?.is_some() {
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "{NAMESPACE}/{name} from an earlier run is not gone after 30 s (a finalizer?)"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        let created = api.create(&PostParams::default(), &obj).await?;
        let text = serde_json::to_string(&created)?;
        let file = dir.join(format!("{i}.json"));
        std::fs::write(&file, &text)?;
        // Enough copies for ~100 MB of texts, between 2 000 and 20 000.
        let n = (100_000_000 / text.len()).clamp(2_000, 20_000);
        let kopf = child("kopf-rs", &file, n)?;
        let store = child("kube-store", &file, n)?;
        println!("| {shape} | {} B | {kopf} B | {store} B |", text.len());
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// Runs `hold` in a fresh process, so no arm inherits another's freed memory.
fn child(arm: &str, file: &Path, n: usize) -> anyhow::Result<u64> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(["hold", arm])
        .arg(file)
        .arg(n.to_string())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{arm} on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.trim().parse()?)
}

/// Holds `n` copies of the object in `file` as `arm` keeps them; returns the growth of resident
/// memory per copy, in bytes.
fn hold(arm: &str, file: &Path, n: usize) -> anyhow::Result<u64> {
    let template: Value = serde_json::from_str(&std::fs::read_to_string(file)?)?;
    let texts = (0..n)
        .map(|i| {
            let mut copy = template.clone();
            copy["metadata"]["name"] = json!(format!("copy-{i:08}"));
            copy["metadata"]["uid"] = json!(format!("00000000-0000-0000-0000-{i:012}"));
            serde_json::to_string(&copy)
        })
        .collect::<Result<Vec<_>, _>>()?;
    match arm {
        "kopf-rs" => keep(&texts, |text| {
            let state = ObjectState::from_json(serde_json::from_str(text)?)?;
            state
                .decode::<KopfExample>()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(state.compacted())
        }),
        "kube-store" => keep(&texts, |text| {
            Ok(Arc::new(serde_json::from_str::<DynamicObject>(text)?))
        }),
        _ => anyhow::bail!("unknown arm {arm}"),
    }
}

/// Parses every text with `parse` and keeps the results; returns the growth of resident memory
/// per text, in bytes (the vector that keeps them is allocated before the first reading).
fn keep<T>(texts: &[String], parse: impl Fn(&str) -> anyhow::Result<T>) -> anyhow::Result<u64> {
    let mut kept = Vec::with_capacity(texts.len());
    let before = procstat::read(std::process::id())?.rss;
    for text in texts {
        kept.push(parse(text)?);
    }
    let after = procstat::read(std::process::id())?.rss;
    Ok(after.saturating_sub(before) / texts.len().max(1) as u64)
}
