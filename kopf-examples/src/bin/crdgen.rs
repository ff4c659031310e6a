//! Prints the YAML of the example CRDs (`KopfExample`, `KopfCluster`), as committed in
//! `kopf-examples/crds/kopfexample.yaml`:
//!
//! ```text
//! cargo run -q -p kopf-examples --bin crdgen > kopf-examples/crds/kopfexample.yaml
//! ```

fn main() -> Result<(), serde_yaml::Error> {
    print!("{}", kopf_examples::crd::crds_yaml()?);
    Ok(())
}
