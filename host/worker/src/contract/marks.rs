//! Marks: points in a worker's queue that the host records and asks about later (a tenant's
//! stream events, contract 0.2). A mark is a small slot number the host hands out per worker;
//! recording it again moves it to the end of the queue, as recording a CUDA event does.

/// Mark slots one worker holds: numbered `0..MAX_MARKS`. Sixteen sessions' worth of events
/// (`MAX_SESSION_EVENTS`, 64, in the runtime) on one lease; a record or a question about a slot
/// past it is `InvalidArgument`.
pub const MAX_MARKS: u32 = 1024;

/// Why `mark` cannot be used: past [`MAX_MARKS`]. `None` where it can.
pub fn out_of_range(mark: u32) -> Option<String> {
    (mark >= MAX_MARKS).then(|| {
        format!("mark {mark} is past the {MAX_MARKS} marks a worker holds; use a slot below {MAX_MARKS}")
    })
}
