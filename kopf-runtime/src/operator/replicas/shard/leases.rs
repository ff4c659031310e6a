//! The Leases of a sharded group as one member reads and writes them: its own Lease
//! (`<group>-<identity>`, labelled with the group), the other members' Leases, and the group's
//! Lease whose annotations hold the claims. Every write is guarded by the `resourceVersion`
//! that was read. What the annotations say is read and written elsewhere (`claims.rs`,
//! `repair.rs`): this file only moves Leases.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};

use crate::operator::ha::lease::{Claimant, Record, claimed, released};

/// The label that marks a member's Lease, with the group's name as its value.
pub(crate) const GROUP_LABEL: &str = "kopf.dev/shard-group";
/// The annotation of a member's Lease that names the member (its holder is cleared on release).
const MEMBER_ANNOTATION: &str = "kopf.dev/shard-member";

/// One member's access to its group's Leases.
#[derive(Clone)]
pub(crate) struct GroupLeases {
    api: Api<Lease>,
    group: String,
    /// This member's identity and this process's incarnation.
    me: Claimant,
    own_name: String,
    duration: Duration,
}

impl std::fmt::Debug for GroupLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupLeases")
            .field("group", &self.group)
            .field("own_name", &self.own_name)
            .finish_non_exhaustive()
    }
}

impl GroupLeases {
    pub(crate) fn new(
        client: Client,
        namespace: &str,
        group: &str,
        me: Claimant,
        duration: Duration,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            group: group.to_owned(),
            own_name: member_lease_name(group, &me.identity),
            me,
            duration,
        }
    }

    /// Renews (or creates) this member's Lease, if `take` says so of the Lease as read: `None`
    /// when it did not (held by another process) or on a conflict (another writer).
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the Lease renewed.
    pub(crate) async fn renew(
        &self,
        take: impl FnOnce(&Lease) -> bool,
    ) -> Result<Option<Lease>, kube::Error> {
        let written = match self.api.get_opt(&self.own_name).await? {
            Some(current) if !take(&current) => return Ok(None),
            Some(current) => {
                let lease = claimed(&current, &self.me, self.duration, Timestamp::now());
                self.api
                    .replace(&self.own_name, &PostParams::default(), &lease)
                    .await
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.own_name.clone()),
                        labels: Some(BTreeMap::from([(
                            GROUP_LABEL.to_owned(),
                            self.group.clone(),
                        )])),
                        annotations: Some(BTreeMap::from([(
                            MEMBER_ANNOTATION.to_owned(),
                            self.me.identity.clone(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    spec: None,
                };
                let lease = claimed(&lease, &self.me, self.duration, Timestamp::now());
                self.api.create(&PostParams::default(), &lease).await
            }
        };
        match written {
            Ok(lease) => Ok(Some(lease)),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// The group's Lease (created when missing): `None` when another member created it at the
    /// same moment.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the group's Lease created.
    pub(crate) async fn group(&self) -> Result<Option<Lease>, kube::Error> {
        let group = match self.api.get_opt(&self.group).await? {
            Some(group) => group,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.group.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: None,
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(group) => group,
                    Err(kube::Error::Api(status)) if status.code == 409 => return Ok(None),
                    Err(err) => return Err(err),
                }
            }
        };
        Ok(Some(group))
    }

    /// What each member's Lease says, by member: every Lease of the group, and a stand-in for
    /// each `named` member (with claims, or waited for) without a Lease (held, unchanged from
    /// when first seen so).
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only reads.
    pub(crate) async fn records(
        &self,
        named: impl IntoIterator<Item = &str>,
    ) -> Result<HashMap<String, Record>, kube::Error> {
        let mut records = HashMap::new();
        for (_, member, record) in self.members().await? {
            if let Some(member) = member {
                records.insert(member, record);
            }
        }
        for member in named {
            records.entry(member.to_owned()).or_insert_with(|| Record {
                holder: Some(member.to_owned()),
                duration: self.duration,
                version: None,
                incarnation: None,
            });
        }
        Ok(records)
    }

    /// Every Lease of the group's members: its name, the member it names, what it says.
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only reads.
    pub(crate) async fn members(
        &self,
    ) -> Result<Vec<(String, Option<String>, Record)>, kube::Error> {
        let selector = format!("{GROUP_LABEL}={}", self.group);
        let list = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?;
        let leases = list.items.iter().map(|lease| {
            let member =
                (lease.metadata.annotations.as_ref()).and_then(|a| a.get(MEMBER_ANNOTATION));
            let name = lease.metadata.name.clone().unwrap_or_default();
            (name, member.cloned(), Record::of(lease))
        });
        Ok(leases.collect())
    }

    /// Sets (`Some`) or removes (`None`) `annotations` of the group's Lease, guarded by the
    /// version of `group` as read (409 if another member wrote meanwhile).
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave them written.
    pub(crate) async fn write_group(
        &self,
        mut group: Lease,
        annotations: &[(&str, Option<String>)],
    ) -> Result<(), kube::Error> {
        let current = group.metadata.annotations.get_or_insert_with(BTreeMap::new);
        for (key, value) in annotations {
            match value {
                Some(value) => current.insert((*key).to_owned(), value.clone()),
                None => current.remove(*key),
            };
        }
        self.api
            .replace(&self.group, &PostParams::default(), &group)
            .await?;
        Ok(())
    }

    /// Releases this member's Lease as last written (no holder), where it may not delete it.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the Lease released (it then expires).
    pub(crate) async fn release(&self, own: &Lease) -> Result<(), kube::Error> {
        let free = released(own, Timestamp::now());
        self.api
            .replace(&self.own_name, &PostParams::default(), &free)
            .await?;
        Ok(())
    }

    /// Deletes this member's Lease as last written (guarded by its version: not if another
    /// process wrote it since): the others see the member gone at their next round.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the Lease deleted (it then expires).
    pub(crate) async fn delete_own(&self, own: &Lease) -> Result<(), kube::Error> {
        let version = own.metadata.resource_version.clone();
        self.delete(&self.own_name, version).await
    }

    /// Deletes the Lease `name` of the group if its version is still `version`.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the Lease deleted.
    pub(crate) async fn delete(
        &self,
        name: &str,
        version: Option<String>,
    ) -> Result<(), kube::Error> {
        let guard = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: version,
                uid: None,
            }),
            ..DeleteParams::default()
        };
        self.api.delete(name, &guard).await?;
        Ok(())
    }

    /// The name of this member's Lease.
    pub(crate) fn own_name(&self) -> &str {
        &self.own_name
    }
}

/// The name of a member's Lease: `<group>-<identity>`, made a valid object name (a hash keeps
/// it unique when characters had to be replaced or it had to be shortened).
pub(crate) fn member_lease_name(group: &str, identity: &str) -> String {
    let raw = format!("{group}-{identity}");
    let clean: String = raw
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    if clean == raw && raw.len() <= 200 {
        return raw;
    }
    let hash = crate::core::hash::fnv64(identity.as_bytes());
    let head: String = clean.chars().take(180).collect();
    format!("{}-{hash:016x}", head.trim_end_matches(['-', '.']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_lease_names_are_valid_and_unique() {
        assert_eq!(member_lease_name("g", "pod-a"), "g-pod-a");
        let upper = member_lease_name("g", "Pod_A");
        let lower = member_lease_name("g", "pod-a");
        assert_ne!(upper, lower);
        assert!(upper.starts_with("g-pod-a-"), "{upper}");
        let long = member_lease_name("g", &"x".repeat(300));
        assert!(long.len() <= 253, "{}", long.len());
    }
}
