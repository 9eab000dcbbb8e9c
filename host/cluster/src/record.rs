//! A node's record: what a node says about itself on every heartbeat, as JSON in the registry.
//!
//! Readers accept fields they do not know (a newer node may add some) and refuse a record whose
//! `format` is newer than theirs, one over [`MAX_RECORD_BYTES`], one with more than
//! [`MAX_DEVICES`] devices, and one whose name is not the key it was found under.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The record format this crate writes and the newest it reads.
pub const RECORD_FORMAT: u32 = 1;

/// The largest record accepted, encoded: far above a real node's (a few hundred bytes per
/// device), small enough that a reader listing many nodes stays cheap.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// The most devices one record may list.
pub const MAX_DEVICES: usize = 256;

/// The longest node name.
pub const MAX_NAME_LEN: usize = 64;

/// A node's name: its key in the registry.
///
/// 1 to [`MAX_NAME_LEN`] characters from `A-Z a-z 0-9 - _ .`, not starting or ending with `.`
/// and without `..` (a host name fits; the key is a NATS subject token sequence, where dots
/// separate tokens and an empty token is invalid).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NodeName(String);

impl NodeName {
    /// Checks `name` against the rules above.
    pub fn new(name: impl Into<String>) -> Result<NodeName, RecordError> {
        let name = name.into();
        let invalid = |reason: &'static str| RecordError::InvalidName {
            name: quote(&name),
            reason,
        };
        if name.is_empty() {
            return Err(invalid("it is empty"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(invalid("it is longer than 64 characters"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(invalid("only A-Z a-z 0-9 - _ . are allowed"));
        }
        if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
            return Err(invalid("a dot may not start or end it, nor follow another"));
        }
        Ok(NodeName(name))
    }

    /// The name as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for NodeName {
    type Err = RecordError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeName::new(s)
    }
}

impl TryFrom<String> for NodeName {
    type Error = RecordError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        NodeName::new(s)
    }
}

impl From<NodeName> for String {
    fn from(name: NodeName) -> String {
        name.0
    }
}

/// A CUDA compute capability, written `major.minor` (`9.0`) in records and requirements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ComputeCapability {
    pub major: u32,
    pub minor: u32,
}

impl ComputeCapability {
    pub const fn new(major: u32, minor: u32) -> ComputeCapability {
        ComputeCapability { major, minor }
    }
}

impl fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// `text` is not `major.minor` with both parts decimal numbers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("compute capability {0:?} is not MAJOR.MINOR (for example 8.6)")]
pub struct InvalidComputeCapability(pub String);

impl FromStr for ComputeCapability {
    type Err = InvalidComputeCapability;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidComputeCapability(quote(text));
        let (major, minor) = text.split_once('.').ok_or_else(invalid)?;
        let number = |part: &str| {
            if part.is_empty() || part.len() > 4 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            part.parse::<u32>().ok()
        };
        Ok(ComputeCapability {
            major: number(major).ok_or_else(invalid)?,
            minor: number(minor).ok_or_else(invalid)?,
        })
    }
}

impl TryFrom<String> for ComputeCapability {
    type Error = InvalidComputeCapability;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<ComputeCapability> for String {
    fn from(cc: ComputeCapability) -> String {
        cc.to_string()
    }
}

/// The backend name of real CUDA hardware.
pub const BACKEND_CUDA: &str = "cuda";
/// The backend name of the PTX emulator.
pub const BACKEND_EMU: &str = "emu";

/// One device a node lends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRecord {
    /// The index a lease names.
    pub index: u32,
    pub name: String,
    /// [`BACKEND_CUDA`] or [`BACKEND_EMU`] (another name is kept and matched as written).
    pub backend: String,
    /// The GPU's or MIG instance's UUID (`GPU-…`, `MIG-…`), `emu-N` for an emulated device;
    /// slots of one GPU share it. Empty in records of nodes that did not say.
    #[serde(default)]
    pub uuid: String,
    /// Bytes the node lends on this device in all.
    pub total_vram: u64,
    /// Bytes not yet granted to leases.
    pub free_vram: u64,
    pub compute_capability: ComputeCapability,
    /// Leases on this device now.
    pub leases: u32,
}

impl From<&tasklet_wire::Device> for DeviceRecord {
    /// A device as the node reports it (GET_INVENTORY), as records and placement see it.
    fn from(d: &tasklet_wire::Device) -> DeviceRecord {
        DeviceRecord {
            index: d.index,
            name: d.name.clone(),
            backend: d.backend.clone(),
            uuid: d.uuid.clone(),
            total_vram: d.total_memory,
            free_vram: d.free_memory,
            compute_capability: ComputeCapability::new(
                d.compute_capability.0,
                d.compute_capability.1,
            ),
            leases: d.leases,
        }
    }
}

/// How busy a node is, beyond its leases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    /// Client connections open now.
    pub connections: u32,
    /// Remote GPU sessions open now.
    pub sessions: u32,
    /// Deployed runs in progress.
    pub runs: u32,
}

/// What a node publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// [`RECORD_FORMAT`] when written by this crate.
    pub format: u32,
    pub name: NodeName,
    /// Where clients reach the node over QUIC (`host:port`).
    pub address: String,
    /// SHA-256 of the node certificate's DER, lowercase hex: a client checks the certificate
    /// the node presents against the fabric CA *and* this fingerprint.
    pub cert_sha256: String,
    /// The node's software version.
    pub version: String,
    pub devices: Vec<DeviceRecord>,
    pub load: Load,
    /// The node refuses new leases and is finishing what runs.
    pub draining: bool,
    /// When the node wrote this record, by its own clock (milliseconds since the Unix epoch).
    /// Informational: freshness is judged by the server's time of the write.
    pub heartbeat_unix_ms: u64,
}

impl NodeRecord {
    /// Leases on all devices.
    pub fn leases(&self) -> u64 {
        self.devices.iter().map(|d| u64::from(d.leases)).sum()
    }

    /// The record as stored: JSON, checked against the limits readers apply.
    pub fn to_json(&self) -> Result<Vec<u8>, RecordError> {
        self.check_shape()?;
        let json = serde_json::to_vec(self).map_err(|e| RecordError::Json(e.to_string()))?;
        if json.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge { len: json.len() });
        }
        Ok(json)
    }

    /// Reads a record found under `key`, refusing what [`NodeRecord::to_json`] would not write.
    pub fn from_json(key: &str, json: &[u8]) -> Result<NodeRecord, RecordError> {
        if json.len() > MAX_RECORD_BYTES {
            return Err(RecordError::TooLarge { len: json.len() });
        }
        let record: NodeRecord =
            serde_json::from_slice(json).map_err(|e| RecordError::Json(e.to_string()))?;
        record.check_shape()?;
        if record.name.as_str() != key {
            return Err(RecordError::KeyMismatch {
                key: quote(key),
                name: record.name.to_string(),
            });
        }
        Ok(record)
    }

    fn check_shape(&self) -> Result<(), RecordError> {
        if self.format > RECORD_FORMAT {
            return Err(RecordError::NewerFormat {
                format: self.format,
            });
        }
        if self.devices.len() > MAX_DEVICES {
            return Err(RecordError::TooManyDevices {
                count: self.devices.len(),
            });
        }
        Ok(())
    }
}

/// A record that cannot be written or was refused on reading.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error("node name {name:?} is invalid: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("record is {len} bytes, over the limit of {MAX_RECORD_BYTES}")]
    TooLarge { len: usize },
    #[error("record lists {count} devices, over the limit of {MAX_DEVICES}")]
    TooManyDevices { count: usize },
    #[error(
        "record format {format} is newer than this reader's ({RECORD_FORMAT}): upgrade tasklet"
    )]
    NewerFormat { format: u32 },
    #[error("record under key {key:?} names node {name:?}")]
    KeyMismatch { key: String, name: String },
    #[error("record is not valid JSON for a node: {0}")]
    Json(String),
}

/// Longest prefix of rejected text quoted back in an error.
const QUOTED_MAX: usize = 80;

fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTED_MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> NodeRecord {
        NodeRecord {
            format: RECORD_FORMAT,
            name: NodeName::new(name).unwrap(),
            address: "127.0.0.1:5701".into(),
            cert_sha256: "ab".repeat(32),
            version: "0.1.0".into(),
            devices: vec![DeviceRecord {
                index: 0,
                name: "emulator".into(),
                backend: BACKEND_EMU.into(),
                uuid: String::new(),
                total_vram: 1 << 30,
                free_vram: 1 << 29,
                compute_capability: ComputeCapability::new(9, 0),
                leases: 2,
            }],
            load: Load::default(),
            draining: false,
            heartbeat_unix_ms: 1,
        }
    }

    #[test]
    fn json_round_trips_and_spells_cc_as_text() {
        let r = record("gpu-1.example");
        let json = r.to_json().unwrap();
        let text = std::str::from_utf8(&json).unwrap();
        assert!(text.contains(r#""compute_capability":"9.0""#), "{text}");
        assert_eq!(NodeRecord::from_json("gpu-1.example", &json).unwrap(), r);
    }

    #[test]
    fn unknown_fields_are_ignored_newer_formats_refused() {
        let mut value = serde_json::to_value(record("a")).unwrap();
        value["added_later"] = serde_json::json!(7);
        let json = serde_json::to_vec(&value).unwrap();
        assert!(NodeRecord::from_json("a", &json).is_ok());
        value["format"] = serde_json::json!(RECORD_FORMAT + 1);
        let json = serde_json::to_vec(&value).unwrap();
        assert!(matches!(
            NodeRecord::from_json("a", &json),
            Err(RecordError::NewerFormat { .. })
        ));
    }

    #[test]
    fn a_devices_uuid_round_trips_and_a_record_without_one_reads() {
        let mut r = record("a");
        r.devices[0].uuid = "GPU-73454bfa-956f".into();
        let json = r.to_json().unwrap();
        assert_eq!(NodeRecord::from_json("a", &json).unwrap(), r);
        // A node that wrote no UUID: read as empty.
        let mut value = serde_json::to_value(record("a")).unwrap();
        value["devices"][0].as_object_mut().unwrap().remove("uuid");
        let json = serde_json::to_vec(&value).unwrap();
        assert_eq!(
            NodeRecord::from_json("a", &json).unwrap().devices[0].uuid,
            ""
        );
    }

    #[test]
    fn a_record_under_another_key_is_refused() {
        let json = record("a").to_json().unwrap();
        assert!(matches!(
            NodeRecord::from_json("b", &json),
            Err(RecordError::KeyMismatch { .. })
        ));
    }

    #[test]
    fn garbage_and_oversized_records_are_errors() {
        assert!(matches!(
            NodeRecord::from_json("a", b"{not json"),
            Err(RecordError::Json(_))
        ));
        let big = vec![b' '; MAX_RECORD_BYTES + 1];
        assert!(matches!(
            NodeRecord::from_json("a", &big),
            Err(RecordError::TooLarge { .. })
        ));
        let mut many = record("a");
        many.devices = vec![many.devices[0].clone(); MAX_DEVICES + 1];
        assert!(matches!(
            many.to_json(),
            Err(RecordError::TooManyDevices { .. })
        ));
    }

    #[test]
    fn names_follow_the_key_rules() {
        for good in [
            "a",
            "node-1",
            "gpu_2.site.example",
            &"x".repeat(MAX_NAME_LEN),
        ] {
            assert!(NodeName::new(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "a b",
            "a/b",
            "a*",
            ">",
            "ü",
            &"x".repeat(MAX_NAME_LEN + 1),
        ] {
            assert!(NodeName::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn compute_capability_spelling() {
        assert_eq!("8.6".parse(), Ok(ComputeCapability::new(8, 6)));
        assert_eq!("10.0".parse(), Ok(ComputeCapability::new(10, 0)));
        for bad in [
            "", "9", "9.", ".0", "9.0.1", "a.b", "-1.0", "+9.0", "99999.0",
        ] {
            assert!(bad.parse::<ComputeCapability>().is_err(), "{bad}");
        }
        assert!(ComputeCapability::new(9, 0) > ComputeCapability::new(8, 9));
        assert!(ComputeCapability::new(10, 0) > ComputeCapability::new(9, 9));
    }
}
