//! What a module's own variables take of device memory in each loaded copy: its `.global`
//! declarations, at module scope and in function bodies alike, packed in order with their
//! alignment (each at least one byte). A loader charges this to the lease that loads the module.
//!
//! `.const` variables live in the device's constant bank, 64 KiB a module on a GPU (the driver
//! refuses a module that needs more); a module that needs more is refused here too, with the
//! same bound on the emulator, so they are not charged.

use crate::lexer::Token;
use crate::load_error as err;
use crate::lower::layout::{decl_align, decl_size};
use crate::parser::declarations_in;
use crate::LoadError;

/// The constant bank a module's `.const` variables share.
pub(crate) const CONST_BANK: u64 = 64 << 10;

/// Bytes of the module's `.global` variables; an error where its `.const` variables do not fit
/// the constant bank.
pub(crate) fn variable_bytes(toks: &[Token<'_>]) -> Result<u64, LoadError> {
    let mut constant = 0u64;
    for d in declarations_in(toks, ".const")? {
        constant = packed(constant, decl_size(&d)?, decl_align(&d), d.line)?;
        if constant > CONST_BANK {
            return Err(err(
                d.line,
                format!(
                    "the module's .const variables need {constant} bytes or more, past the {CONST_BANK}-byte constant bank \
                     a module has on a GPU; put large tables in .global memory or a buffer"
                ),
            ));
        }
    }
    let mut global = 0u64;
    for d in declarations_in(toks, ".global")? {
        global = packed(global, decl_size(&d)?, decl_align(&d), d.line)?;
    }
    Ok(global)
}

/// The end of a variable of `size` bytes placed after `end` at `align`.
fn packed(end: u64, size: u64, align: u64, line: u32) -> Result<u64, LoadError> {
    end.checked_next_multiple_of(align.max(1))
        .and_then(|at| at.checked_add(size.max(1)))
        .ok_or_else(|| err(line, "module variables too large"))
}
