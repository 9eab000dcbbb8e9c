//! Operation codes: what a frame is about, and the rules that follow from it (which direction
//! carries it, whether it gets a reply, whether data follows it).

/// An operation. The number is its code on the wire; see docs/wire.md for each one's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum Opcode {
    /// Node → client only, request id 0: the node is closing the connection, and says why.
    GoAway = 0x0000,
    /// Version negotiation; the first request on a connection.
    Hello = 0x0001,
    /// Narrow the connection's grant to what the client asks for (a tasklet's manifest), before
    /// its first lease; the reply is the grant in force.
    Grant = 0x0002,
    /// The node's devices.
    GetInventory = 0x0100,
    /// Acquire a GPU and allocate device memory for a time.
    LeaseAlloc = 0x0200,
    /// Release a lease and free all of its device memory.
    MemFree = 0x0201,
    /// Extend a lease; bumps its generation.
    LeaseRenew = 0x0202,
    /// A lease's grant, use and remaining time.
    LeaseInfo = 0x0203,
    /// Acquire a group of leases on distinct devices, all or none.
    LeaseAllocGroup = 0x0204,
    /// One-shot: load a module, launch one kernel on a lease's memory, read back a region.
    GpuSubmit = 0x0600,
    /// Session: allocate a buffer.
    MemAlloc = 0x0601,
    /// Session, pipelined (no reply): write streamed data into a buffer.
    MemWrite = 0x0602,
    /// Session: load a PTX module.
    ModuleLoad = 0x0603,
    /// Session, pipelined (no reply): launch a kernel.
    Launch = 0x0604,
    /// Session: wait for all earlier work of the session.
    Sync = 0x0605,
    /// Session: read a buffer (the reply streams the bytes) after all earlier work of the session.
    MemRead = 0x0606,
    /// Session: free one buffer.
    Free = 0x0607,
    /// Open a session on a lease.
    SessionOpen = 0x0608,
    /// Close a session, freeing its buffers and modules.
    SessionClose = 0x0609,
    /// Session: copy between two buffers on the device.
    MemCopy = 0x060A,
    /// Session: compile CUDA C and load the result.
    ModuleLoadSource = 0x060B,
    /// Session: unload a module.
    ModuleUnload = 0x060C,
    /// Session: launch one kernel many times, each launch with some arguments changed; refused
    /// whole or queued whole (the reply comes once every launch is queued).
    LaunchBurst = 0x060D,
    /// Session: one operation on a recorded graph (record, set, replay, drop).
    Graph = 0x060E,
    /// Copy between buffers of two sessions of the connection (typically on two devices).
    MemCopyBetween = 0x060F,
    /// Session: one operation on its streams and events.
    QueueOp = 0x0610,
    /// Session, pipelined (no reply): MEM_WRITE queued on one of the session's streams.
    StreamWrite = 0x0611,
    /// Session, pipelined (no reply): LAUNCH queued on one of the session's streams.
    StreamLaunch = 0x0612,
    /// Session: MEM_READ queued on one of the session's streams (the reply streams the bytes).
    StreamRead = 0x0613,
    /// Store a deployment (manifest + streamed component).
    DeployPush = 0x0700,
    /// Whether a deployment is stored.
    DeployHas = 0x0701,
    /// Run a stored deployment on streamed input; the reply streams its output.
    DeployRun = 0x0702,
    /// No reply: the streams' branches of a fork come after what this stream carried before it,
    /// and what it carries after it comes after all of them (a transfer spread over streams).
    Fork = 0x0800,
    /// No reply: what follows on this stream, up to its BRANCH_END, is a branch of a fork.
    Branch = 0x0801,
    /// No reply: the end of this stream's branch.
    BranchEnd = 0x0802,
}

impl Opcode {
    /// Every opcode, in numeric order.
    pub const ALL: [Opcode; 35] = [
        Opcode::GoAway,
        Opcode::Hello,
        Opcode::Grant,
        Opcode::GetInventory,
        Opcode::LeaseAlloc,
        Opcode::MemFree,
        Opcode::LeaseRenew,
        Opcode::LeaseInfo,
        Opcode::LeaseAllocGroup,
        Opcode::GpuSubmit,
        Opcode::MemAlloc,
        Opcode::MemWrite,
        Opcode::ModuleLoad,
        Opcode::Launch,
        Opcode::Sync,
        Opcode::MemRead,
        Opcode::Free,
        Opcode::SessionOpen,
        Opcode::SessionClose,
        Opcode::MemCopy,
        Opcode::ModuleLoadSource,
        Opcode::ModuleUnload,
        Opcode::LaunchBurst,
        Opcode::Graph,
        Opcode::MemCopyBetween,
        Opcode::QueueOp,
        Opcode::StreamWrite,
        Opcode::StreamLaunch,
        Opcode::StreamRead,
        Opcode::DeployPush,
        Opcode::DeployHas,
        Opcode::DeployRun,
        Opcode::Fork,
        Opcode::Branch,
        Opcode::BranchEnd,
    ];

    /// The opcode with this number, if there is one.
    pub fn from_u16(code: u16) -> Option<Opcode> {
        Opcode::ALL.iter().copied().find(|op| *op as u16 == code)
    }

    /// The name docs/wire.md uses.
    pub fn name(self) -> &'static str {
        match self {
            Opcode::GoAway => "GOAWAY",
            Opcode::Hello => "HELLO",
            Opcode::Grant => "GRANT",
            Opcode::GetInventory => "GET_INVENTORY",
            Opcode::LeaseAlloc => "LEASE_ALLOC",
            Opcode::MemFree => "MEM_FREE",
            Opcode::LeaseRenew => "LEASE_RENEW",
            Opcode::LeaseInfo => "LEASE_INFO",
            Opcode::LeaseAllocGroup => "LEASE_ALLOC_GROUP",
            Opcode::GpuSubmit => "GPU_SUBMIT",
            Opcode::MemAlloc => "MEM_ALLOC",
            Opcode::MemWrite => "MEM_WRITE",
            Opcode::ModuleLoad => "MODULE_LOAD",
            Opcode::Launch => "LAUNCH",
            Opcode::Sync => "SYNC",
            Opcode::MemRead => "MEM_READ",
            Opcode::Free => "FREE",
            Opcode::SessionOpen => "SESSION_OPEN",
            Opcode::SessionClose => "SESSION_CLOSE",
            Opcode::MemCopy => "MEM_COPY",
            Opcode::ModuleLoadSource => "MODULE_LOAD_SOURCE",
            Opcode::ModuleUnload => "MODULE_UNLOAD",
            Opcode::LaunchBurst => "LAUNCH_BURST",
            Opcode::Graph => "GRAPH",
            Opcode::MemCopyBetween => "MEM_COPY_BETWEEN",
            Opcode::QueueOp => "QUEUE_OP",
            Opcode::StreamWrite => "STREAM_WRITE",
            Opcode::StreamLaunch => "STREAM_LAUNCH",
            Opcode::StreamRead => "STREAM_READ",
            Opcode::DeployPush => "DEPLOY_PUSH",
            Opcode::DeployHas => "DEPLOY_HAS",
            Opcode::DeployRun => "DEPLOY_RUN",
            Opcode::Fork => "FORK",
            Opcode::Branch => "BRANCH",
            Opcode::BranchEnd => "BRANCH_END",
        }
    }

    /// Whether a client may send this as a request (all but GOAWAY).
    pub fn is_request(self) -> bool {
        self != Opcode::GoAway
    }

    /// Whether the node answers a request of this kind. LAUNCH and MEM_WRITE (and their stream
    /// forms) are pipelined: they get no reply, and their failures are reported by the session's
    /// next barrier. FORK, BRANCH and BRANCH_END only order a connection's streams: they are
    /// never answered, and a misuse of them ends the connection.
    pub fn has_reply(self) -> bool {
        !self.is_pipelined() && !self.is_fork_marker() && self.is_request()
    }

    /// Whether this is FORK, BRANCH or BRANCH_END.
    pub fn is_fork_marker(self) -> bool {
        matches!(self, Opcode::Fork | Opcode::Branch | Opcode::BranchEnd)
    }

    /// Whether this is a pipelined session op (no reply; errors surface at the next barrier).
    pub fn is_pipelined(self) -> bool {
        matches!(
            self,
            Opcode::Launch | Opcode::MemWrite | Opcode::StreamLaunch | Opcode::StreamWrite
        )
    }

    /// Whether this op reports the failure of a pipelined op of its session sent before it.
    /// SYNC and MEM_READ wait for all earlier work of the session; STREAM_READ waits on the
    /// device only for the work its stream depends on, but every earlier pipelined op of the
    /// session has been accepted or refused by the time it runs, so it reports a refusal too
    /// (a read must not return bytes a refused write on its stream never wrote).
    pub fn is_barrier(self) -> bool {
        matches!(self, Opcode::Sync | Opcode::MemRead | Opcode::StreamRead)
    }
}

impl std::fmt::Display for Opcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (0x{:04X})", self.name(), *self as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_are_sorted() {
        for pair in Opcode::ALL.windows(2) {
            assert!(
                (pair[0] as u16) < (pair[1] as u16),
                "{} before {}",
                pair[0],
                pair[1]
            );
        }
        for op in Opcode::ALL {
            assert_eq!(Opcode::from_u16(op as u16), Some(op));
        }
        assert_eq!(Opcode::from_u16(0x0604), Some(Opcode::Launch));
        assert_eq!(Opcode::from_u16(0x0002), Some(Opcode::Grant));
        assert_eq!(Opcode::from_u16(0x0003), None);
        assert_eq!(Opcode::from_u16(0xFFFF), None);
    }

    #[test]
    fn fixed_numbers() {
        assert_eq!(Opcode::LeaseAlloc as u16, 0x0200);
        assert_eq!(Opcode::GpuSubmit as u16, 0x0600);
        let session_ops = [
            Opcode::MemAlloc,
            Opcode::MemWrite,
            Opcode::ModuleLoad,
            Opcode::Launch,
            Opcode::Sync,
            Opcode::MemRead,
            Opcode::Free,
        ];
        for (i, op) in session_ops.into_iter().enumerate() {
            assert_eq!(op as u16, 0x0601 + i as u16);
        }
    }

    #[test]
    fn directions() {
        assert!(!Opcode::GoAway.is_request());
        assert!(!Opcode::GoAway.has_reply());
        assert!(Opcode::Launch.is_request() && !Opcode::Launch.has_reply());
        assert!(Opcode::MemWrite.is_request() && !Opcode::MemWrite.has_reply());
        assert!(Opcode::Sync.has_reply() && Opcode::Sync.is_barrier());
        assert!(!Opcode::MemCopy.is_barrier());
        assert!(Opcode::MemCopyBetween.has_reply() && !Opcode::MemCopyBetween.is_barrier());
        assert!(Opcode::LeaseAllocGroup.has_reply());
        assert!(Opcode::QueueOp.has_reply() && !Opcode::QueueOp.is_barrier());
        for op in [Opcode::StreamLaunch, Opcode::StreamWrite] {
            assert!(op.is_request() && op.is_pipelined() && !op.has_reply());
        }
        assert!(Opcode::StreamRead.has_reply() && Opcode::StreamRead.is_barrier());
        assert_eq!(Opcode::StreamWrite as u16, 0x0611);
        assert_eq!(Opcode::StreamLaunch as u16, 0x0612);
        assert_eq!(Opcode::StreamRead as u16, 0x0613);
        for op in [Opcode::Fork, Opcode::Branch, Opcode::BranchEnd] {
            assert!(op.is_request() && !op.has_reply() && !op.is_pipelined() && !op.is_barrier());
        }
    }
}
