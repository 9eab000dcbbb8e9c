//! Kernel signatures: each `.entry`'s parameters as the launch argument block lays them out, and
//! as PTX spells their types. Needs only the module's declarations and function headers, so it
//! also serves modules whose bodies the emulator cannot run.

use super::err;
use super::layout::{decl_align, decl_size};
use crate::ast::{self, StateSpace};
use crate::{KernelInfo, LoadError, ParamInfo, ParamType};

/// The launch signature of an `.entry`: its parameters as the argument block lays them out.
/// Shared by [`super::lower`] and [`entry_signatures`] so both report the same layout.
pub(super) fn kernel_info(f: &ast::Function) -> Result<KernelInfo, LoadError> {
    let mut params = Vec::new();
    let addresses = super::address_use::address_params(f);
    for (p, &used_as_address) in f.params.iter().zip(&addresses) {
        if p.space != StateSpace::Param {
            return Err(err(
                p.line,
                format!("kernel parameter `{}` must be in .param space", p.name),
            ));
        }
        let size = decl_size(p)?;
        if size == 0 || size > 32 * 1024 {
            return Err(err(
                p.line,
                format!("bad size for kernel parameter `{}`", p.name),
            ));
        }
        params.push(ParamInfo {
            name: p.name.clone(),
            size: size as u32,
            align: decl_align(p) as u32,
            pointer_sized: matches!(p.ty.as_str(), "u64" | "b64" | "s64")
                && p.dims.is_empty()
                && p.vec == 1,
            ty: ParamType::of(&p.ty, p.vec, !p.dims.is_empty()),
            used_as_address,
        });
    }
    let info = KernelInfo {
        name: f.name.clone(),
        params,
    };
    // CUDA caps a kernel's parameter space; refusing more here keeps every later layout (the
    // emulator's, the host's argument block) free of overflow.
    if info.checked_param_layout(crate::MAX_PARAM_BYTES).is_none() {
        return Err(err(
            f.line,
            format!(
                "kernel `{}` declares more than {} bytes of parameters",
                f.name,
                crate::MAX_PARAM_BYTES
            ),
        ));
    }
    Ok(info)
}

/// The defined `.entry` kernels of a module, in source order, without lowering any body (the
/// module may use instructions [`super::lower`] refuses).
pub(crate) fn entry_signatures(m: &ast::ModuleAst) -> Result<Vec<KernelInfo>, LoadError> {
    m.funcs
        .iter()
        .filter(|f| f.is_entry && f.body.is_some())
        .map(kernel_info)
        .collect()
}

/// Each defined entry's parameter declarations as PTX writes them (`.u64`, `.align 8 .b8[12]`),
/// parallel to [`entry_signatures`].
pub(crate) fn entry_param_types(m: &ast::ModuleAst) -> Vec<Vec<String>> {
    m.funcs
        .iter()
        .filter(|f| f.is_entry && f.body.is_some())
        .map(|f| {
            f.params
                .iter()
                .map(|p| {
                    let mut s = String::new();
                    if let Some(a) = p.align {
                        s.push_str(&format!(".align {a} "));
                    }
                    if p.vec > 1 {
                        s.push_str(&format!(".v{} ", p.vec));
                    }
                    s.push('.');
                    s.push_str(&p.ty);
                    for d in &p.dims {
                        match d {
                            Some(n) => s.push_str(&format!("[{n}]")),
                            None => s.push_str("[]"),
                        }
                    }
                    s
                })
                .collect()
        })
        .collect()
}
