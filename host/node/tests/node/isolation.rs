//! A connection's ids mean nothing on another connection: a tenant cannot use, free or read what
//! another one holds, even knowing its ids.

use crate::support::*;
use tasklet_remote::NodeClient;
use tasklet_wire::{BufferId, ErrorCode, LeaseId, Reply, Request, SessionId};

fn session_of(client: &mut NodeClient, lease: LeaseId) -> SessionId {
    match client
        .request(&Request::SessionOpen { lease })
        .expect("session opens")
        .0
    {
        Reply::SessionOpen { session } => session,
        other => panic!("{other:?}"),
    }
}

pub fn another_tenants_ids_are_refused() -> TestResult {
    let node = TestNode::start();
    let mut owner = node.client("dev");
    let lease = owner
        .lease_alloc(1 << 20, 30, None)
        .map_err(|e| e.to_string())?
        .lease;
    let session = session_of(&mut owner, lease);
    let buffer = match owner
        .request(&Request::MemAlloc {
            session,
            bytes: 4096,
        })
        .map_err(|e| e.to_string())?
        .0
    {
        Reply::MemAlloc { buffer } => buffer,
        other => return Err(format!("{other:?}").into()),
    };
    owner
        .post(
            &Request::MemWrite {
                session,
                buffer,
                offset: 0,
                len: 4,
            },
            b"mine",
        )
        .map_err(|e| e.to_string())?;

    // Another tenant, and then the same tenant on another connection: neither gets anywhere.
    for thief in ["team", "dev"] {
        let mut other = node.client(thief);
        let attempts = [
            Request::MemFree { lease },
            Request::LeaseInfo { lease },
            Request::LeaseRenew { lease, seconds: 5 },
            Request::SessionOpen { lease },
            Request::MemRead {
                session,
                buffer,
                offset: 0,
                len: 4,
            },
            Request::MemAlloc {
                session,
                bytes: 4096,
            },
            Request::Sync { session },
        ];
        for attempt in attempts {
            let opcode = attempt.opcode();
            match other.request(&attempt) {
                Ok((reply, data)) => {
                    return Err(format!(
                    "{thief}: {opcode} on another connection's ids succeeded: {reply:?} {data:?}"
                )
                    .into())
                }
                Err(err) => check(
                    matches!(
                        err.code(),
                        Some(
                            ErrorCode::NotFound
                                | ErrorCode::InvalidArgument
                                | ErrorCode::Unauthorized
                        )
                    ),
                    || format!("{thief}: {opcode}: {err}"),
                )?,
            }
        }
        // A guessed id fares no better than a stolen one.
        let guess = Request::MemRead {
            session: SessionId(1),
            buffer: BufferId(1),
            offset: 0,
            len: 1,
        };
        check(other.request(&guess).is_err(), || {
            "a guessed id was accepted".into()
        })?;
    }
    // The owner's lease and data are untouched.
    let (_, data) = owner
        .request(&Request::MemRead {
            session,
            buffer,
            offset: 0,
            len: 4,
        })
        .map_err(|e| e.to_string())?;
    check(data == b"mine", || format!("{data:?}"))?;
    check(node.accounting().leases == 1, || {
        format!("{:?}", node.accounting())
    })?;
    owner.mem_free(lease).map_err(|e| e.to_string())?;
    node.wait_for_baseline(WAIT)?;
    Ok(())
}
