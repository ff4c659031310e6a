//! Prints the operator's CRD as YAML, to install it or to refresh `deploy/crd.yaml`:
//!
//! ```text
//! cargo run --bin crdgen | kubectl apply -f -
//! cargo run --bin crdgen > deploy/crd.yaml
//! ```

fn main() -> Result<(), serde_yaml::Error> {
    print!("{}", operator::crd::crd_yaml()?);
    Ok(())
}
