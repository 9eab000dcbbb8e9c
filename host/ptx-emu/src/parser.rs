//! Tokens → [`ModuleAst`]. Syntax only; what the instructions mean is checked in `lower`.

use crate::ast::*;
use crate::lexer::{Tok, Token};
use crate::load_error as err;
use crate::LoadError;

struct P<'a, 't> {
    toks: &'t [Token<'a>],
    i: usize,
    /// Signatures only: function bodies are skipped by brace matching, not parsed.
    skip_bodies: bool,
    /// How deep the operand or initializer being parsed is nested (see [`MAX_NESTING`]).
    depth: u32,
}

/// The deepest operands (`{…}`, `(…)`, `!`, `a|b`) and initializers (`{…}`) may nest. They are
/// parsed by recursion, and so are the trees they make when lowered and dropped: without a
/// bound, a few kilobytes of `((((…` would overflow the parsing thread's stack and abort its
/// process. PTX that compilers write nests two or three deep.
pub(crate) const MAX_NESTING: u32 = 32;

const LINKAGE: &[&str] = &[".visible", ".extern", ".weak", ".common"];

impl<'a> P<'a, '_> {
    fn peek(&self) -> Option<Tok<'a>> {
        self.toks.get(self.i).map(|t| t.tok)
    }
    fn peek_at(&self, k: usize) -> Option<Tok<'a>> {
        self.toks.get(self.i + k).map(|t| t.tok)
    }
    fn line(&self) -> u32 {
        self.toks
            .get(self.i)
            .or(self.toks.last())
            .map_or(1, |t| t.line)
    }
    fn next(&mut self) -> Result<Tok<'a>, LoadError> {
        let t = self
            .toks
            .get(self.i)
            .ok_or_else(|| err(self.line(), "unexpected end of input"))?;
        self.i += 1;
        Ok(t.tok)
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(Tok::Punct(c)) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: char) -> Result<(), LoadError> {
        let line = self.line();
        match self.next()? {
            Tok::Punct(p) if p == c => Ok(()),
            t => Err(err(line, format!("expected `{c}`, found {}", show(t)))),
        }
    }
    fn word(&mut self) -> Result<&'a str, LoadError> {
        let line = self.line();
        match self.next()? {
            Tok::Word(w) => Ok(w),
            t => Err(err(line, format!("expected a name, found {}", show(t)))),
        }
    }
    /// Runs `parse` one level of nesting deeper, refusing past [`MAX_NESTING`].
    fn nested<T>(
        &mut self,
        line: u32,
        parse: impl FnOnce(&mut Self) -> Result<T, LoadError>,
    ) -> Result<T, LoadError> {
        if self.depth >= MAX_NESTING {
            return Err(err(
                line,
                format!("operands or initializers nested more than {MAX_NESTING} deep"),
            ));
        }
        self.depth += 1;
        let parsed = parse(self);
        self.depth -= 1;
        parsed
    }
    fn int(&mut self) -> Result<u64, LoadError> {
        let line = self.line();
        match self.next()? {
            Tok::Int(v) => Ok(v),
            t => Err(err(line, format!("expected an integer, found {}", show(t)))),
        }
    }
    /// Skips the rest of the current source line (for line-oriented directives such as `.loc`).
    fn skip_line(&mut self, line: u32) {
        while self.toks.get(self.i).is_some_and(|t| t.line == line) {
            self.i += 1;
        }
    }
    fn skip_to_semicolon(&mut self) -> Result<(), LoadError> {
        while !self.eat(';') {
            self.next()?;
        }
        Ok(())
    }
    fn skip_braces(&mut self) -> Result<(), LoadError> {
        self.expect('{')?;
        let mut depth = 1;
        while depth > 0 {
            match self.next()? {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth -= 1,
                _ => {}
            }
        }
        Ok(())
    }
}

fn show(t: Tok<'_>) -> String {
    match t {
        Tok::Word(w) => format!("`{w}`"),
        Tok::Int(v) => format!("`{v}`"),
        Tok::F32(b) => format!("`0f{b:08X}`"),
        Tok::F64(b) => format!("`0d{b:016X}`"),
        Tok::Float(v) => format!("`{v}`"),
        Tok::Str(s) => format!("\"{s}\""),
        Tok::Punct(c) => format!("`{c}`"),
    }
}

pub(crate) fn parse(toks: &[Token<'_>]) -> Result<ModuleAst, LoadError> {
    parse_module(toks, false)
}

/// Like [`parse`], but every function body is skipped (only its braces are matched) and comes back
/// as `Some(vec![])`: module-level declarations and function signatures only, for
/// [`crate::entry_signatures`].
pub(crate) fn parse_signatures(toks: &[Token<'_>]) -> Result<ModuleAst, LoadError> {
    parse_module(toks, true)
}

fn parse_module(toks: &[Token<'_>], skip_bodies: bool) -> Result<ModuleAst, LoadError> {
    let mut p = P {
        toks,
        i: 0,
        skip_bodies,
        depth: 0,
    };
    let mut m = ModuleAst::default();
    while let Some(t) = p.peek() {
        let line = p.line();
        let w = match t {
            Tok::Word(w) => w,
            t => return Err(err(line, format!("unexpected {} at module level", show(t)))),
        };
        match w {
            ".version" | ".target" | ".address_size" | ".file" | ".loc" => {
                if w == ".address_size" {
                    p.next()?;
                    let bits = p.int()?;
                    if bits != 64 {
                        return Err(err(
                            line,
                            format!(".address_size {bits} is not supported (only 64)"),
                        ));
                    }
                }
                p.skip_line(line);
            }
            ".section" => {
                p.next()?;
                p.word()?;
                p.skip_braces()?;
            }
            ".pragma" => {
                p.next()?;
                p.skip_to_semicolon()?;
            }
            _ => {
                let mut is_extern = false;
                while let Some(Tok::Word(l)) = p.peek() {
                    if LINKAGE.contains(&l) {
                        is_extern |= l == ".extern";
                        p.next()?;
                    } else {
                        break;
                    }
                }
                let line = p.line();
                match p.peek() {
                    Some(Tok::Word(".entry")) | Some(Tok::Word(".func")) => {
                        m.funcs.push(function(&mut p)?);
                    }
                    Some(Tok::Word(".global" | ".const" | ".shared")) => {
                        let mut decls = var_decls(&mut p)?;
                        for d in &mut decls {
                            d.is_extern = is_extern;
                        }
                        m.vars.extend(decls);
                    }
                    Some(t) => {
                        return Err(err(
                            line,
                            format!("unknown module-level directive {}", show(t)),
                        ))
                    }
                    None => return Err(err(line, "unexpected end of input")),
                }
            }
        }
    }
    Ok(m)
}

fn space_of(w: &str) -> Option<StateSpace> {
    Some(match w {
        ".global" => StateSpace::Global,
        ".shared" => StateSpace::Shared,
        ".local" => StateSpace::Local,
        ".param" => StateSpace::Param,
        ".const" => StateSpace::Const,
        ".reg" => StateSpace::Reg,
        _ => return None,
    })
}

/// Parses `<space> [attrs] .type name[dims] [= init] {, name...} ;` (the `;` optional when `in_params`).
/// Every declaration in state space `space` (`.global`, `.const`) anywhere in the module: at
/// module scope and in any function's body, at any depth. A directive word is one token of its
/// own (an instruction's `ld.global.u32` is one word), so each such token starts a declaration,
/// but where it follows `.ptr` (a pointer parameter's attributes: `.param .u64 .ptr .global
/// .align 1 p`); this reads the declarations alone, whether or not the bodies around them parse.
pub(crate) fn declarations_in(toks: &[Token<'_>], space: &str) -> Result<Vec<VarDecl>, LoadError> {
    let mut decls = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let after_ptr = i
            .checked_sub(1)
            .is_some_and(|j| toks[j].tok == Tok::Word(".ptr"));
        if t.tok == Tok::Word(space) && !after_ptr {
            let mut p = P {
                toks,
                i,
                skip_bodies: true,
                depth: 0,
            };
            decls.extend(var_decl_list(&mut p, false)?);
        }
    }
    Ok(decls)
}

fn var_decls(p: &mut P<'_, '_>) -> Result<Vec<VarDecl>, LoadError> {
    let decls = var_decl_list(p, false)?;
    p.expect(';')?;
    Ok(decls)
}

fn var_decl_list(p: &mut P<'_, '_>, is_param: bool) -> Result<Vec<VarDecl>, LoadError> {
    let line = p.line();
    let sw = p.word()?;
    let space =
        space_of(sw).ok_or_else(|| err(line, format!("expected a state space, found `{sw}`")))?;
    let mut align = None;
    let mut vec = 1;
    let mut ty = None;
    let mut after_ptr = false;
    while let Some(Tok::Word(w)) = p.peek() {
        if !w.starts_with('.') {
            break;
        }
        p.next()?;
        match w {
            ".align" => {
                let a = p.int()?;
                if !after_ptr {
                    if a == 0 || !a.is_power_of_two() || a > 1 << 16 {
                        return Err(err(line, format!("bad alignment {a}")));
                    }
                    align = Some(a as u32);
                }
            }
            ".v2" => vec = 2,
            ".v4" => vec = 4,
            ".v8" => vec = 8,
            ".ptr" => after_ptr = true,
            ".global" | ".shared" | ".local" | ".const" if after_ptr => {}
            _ => {
                if ty.is_some() {
                    return Err(err(line, format!("unexpected `{w}` in declaration")));
                }
                ty = Some(w[1..].to_string());
            }
        }
    }
    let ty = ty.ok_or_else(|| err(line, "declaration without a type"))?;
    let mut out = Vec::new();
    loop {
        let line = p.line();
        let name = p.word()?.to_string();
        let mut d = VarDecl {
            line,
            space,
            align,
            ty: ty.clone(),
            vec,
            name,
            dims: Vec::new(),
            init: None,
            is_extern: false,
            range: None,
        };
        if p.eat('<') {
            let n = p.int()?;
            p.expect('>')?;
            if n > 1 << 20 {
                return Err(err(line, format!("register range <{n}> is too large")));
            }
            d.range = Some(n as u32);
        }
        while p.eat('[') {
            if p.eat(']') {
                d.dims.push(None);
            } else {
                let n = p.int()?;
                p.expect(']')?;
                d.dims.push(Some(n));
            }
        }
        if p.eat('=') {
            let mut init = Vec::new();
            initializer(p, &mut init)?;
            d.init = Some(init);
        }
        out.push(d);
        if is_param || !p.eat(',') {
            break;
        }
    }
    Ok(out)
}

fn initializer(p: &mut P<'_, '_>, out: &mut Vec<InitElem>) -> Result<(), LoadError> {
    if p.eat('{') {
        if p.eat('}') {
            return Ok(());
        }
        loop {
            let line = p.line();
            p.nested(line, |p| initializer(p, out))?;
            if p.eat('}') {
                return Ok(());
            }
            p.expect(',')?;
        }
    }
    let line = p.line();
    let neg = p.eat('-');
    let e = match p.next()? {
        Tok::Int(v) => InitElem::Int(if neg { v.wrapping_neg() } else { v }),
        Tok::F32(b) => InitElem::F32(if neg { b ^ 0x8000_0000 } else { b }),
        Tok::F64(b) => InitElem::F64(if neg { b ^ (1 << 63) } else { b }),
        Tok::Float(v) => InitElem::Float(if neg { -v } else { v }),
        Tok::Word(w) if !neg => {
            // `generic(sym)` or `sym`, optionally `+off`.
            let name = if w == "generic" {
                p.expect('(')?;
                let n = p.word()?;
                p.expect(')')?;
                n
            } else {
                w
            };
            let mut off = 0i64;
            while let Some(Tok::Punct(c @ ('+' | '-'))) = p.peek() {
                p.next()?;
                let v = p.int()? as i64;
                off = if c == '+' {
                    off.wrapping_add(v)
                } else {
                    off.wrapping_sub(v)
                };
            }
            InitElem::Sym(name.to_string(), off)
        }
        t => return Err(err(line, format!("bad initializer {}", show(t)))),
    };
    out.push(e);
    Ok(())
}

fn param_list(p: &mut P<'_, '_>) -> Result<Vec<VarDecl>, LoadError> {
    p.expect('(')?;
    let mut out = Vec::new();
    if p.eat(')') {
        return Ok(out);
    }
    loop {
        out.extend(var_decl_list(p, true)?);
        if p.eat(')') {
            return Ok(out);
        }
        p.expect(',')?;
    }
}

fn function(p: &mut P<'_, '_>) -> Result<Function, LoadError> {
    let line = p.line();
    let kind = p.word()?;
    let is_entry = kind == ".entry";
    let mut rets = Vec::new();
    if !is_entry && p.peek() == Some(Tok::Punct('(')) {
        rets = param_list(p)?;
    }
    let name = p.word()?.to_string();
    let params = if p.peek() == Some(Tok::Punct('(')) {
        param_list(p)?
    } else {
        Vec::new()
    };
    // Performance directives and attributes between the header and the body.
    loop {
        match p.peek() {
            Some(Tok::Word(w)) if w.starts_with('.') => {
                p.next()?;
                while matches!(p.peek(), Some(Tok::Int(_))) {
                    p.next()?;
                    p.eat(',');
                }
            }
            _ => break,
        }
    }
    if p.eat(';') {
        return Ok(Function {
            line,
            is_entry,
            name,
            rets,
            params,
            body: None,
        });
    }
    if p.skip_bodies {
        let open = p.line();
        if p.peek() != Some(Tok::Punct('{')) {
            p.expect('{')?;
        }
        p.skip_braces()
            .map_err(|_| err(open, "unterminated function body"))?;
        return Ok(Function {
            line,
            is_entry,
            name,
            rets,
            params,
            body: Some(Vec::new()),
        });
    }
    let body = body(p)?;
    Ok(Function {
        line,
        is_entry,
        name,
        rets,
        params,
        body: Some(body),
    })
}

fn body(p: &mut P<'_, '_>) -> Result<Vec<Stmt>, LoadError> {
    p.expect('{')?;
    let mut out = Vec::new();
    let mut depth = 1u32;
    loop {
        let line = p.line();
        match p.peek() {
            None => return Err(err(line, "unterminated function body")),
            Some(Tok::Punct('{')) => {
                p.next()?;
                depth += 1;
                out.push(Stmt::Open);
            }
            Some(Tok::Punct('}')) => {
                p.next()?;
                depth -= 1;
                if depth == 0 {
                    return Ok(out);
                }
                out.push(Stmt::Close(line));
            }
            Some(Tok::Word(".loc" | ".file")) => p.skip_line(line),
            Some(Tok::Word(".pragma" | ".callprototype" | ".maxnreg")) => {
                p.next()?;
                p.skip_to_semicolon()?;
            }
            Some(Tok::Word(w)) if space_of(w).is_some() => {
                out.extend(var_decls(p)?.into_iter().map(Stmt::Var));
            }
            Some(Tok::Word(w)) if p.peek_at(1) == Some(Tok::Punct(':')) => {
                p.next()?;
                p.next()?;
                out.push(Stmt::Label(line, w.to_string()));
            }
            Some(Tok::Punct('@')) | Some(Tok::Word(_)) => out.push(Stmt::Inst(instruction(p)?)),
            Some(t) => {
                return Err(err(
                    line,
                    format!("unexpected {} in function body", show(t)),
                ))
            }
        }
    }
}

fn instruction(p: &mut P<'_, '_>) -> Result<Inst, LoadError> {
    let line = p.line();
    let mut guard = None;
    if p.eat('@') {
        let neg = p.eat('!');
        guard = Some((p.word()?.to_string(), neg));
    }
    let opcode = p.word()?;
    if opcode.starts_with('.') {
        return Err(err(line, format!("unknown directive `{opcode}`")));
    }
    let mut operands = Vec::new();
    let ctx = |e: LoadError| LoadError {
        line: e.line,
        message: format!("{} (in `{opcode}`)", e.message),
    };
    if !p.eat(';') {
        loop {
            operands.push(operand(p).map_err(ctx)?);
            if p.eat(';') {
                break;
            }
            let l = p.line();
            if !p.eat(',') {
                let t = p.next()?;
                return Err(err(
                    l,
                    format!(
                        "expected `,` or `;` after an operand of `{opcode}`, found {}",
                        show(t)
                    ),
                ));
            }
        }
    }
    Ok(Inst {
        line,
        guard,
        opcode: opcode.to_string(),
        operands,
    })
}

fn signed_int(p: &mut P<'_, '_>) -> Result<i64, LoadError> {
    let neg = p.eat('-');
    let v = p.int()? as i64;
    Ok(if neg { v.wrapping_neg() } else { v })
}

fn operand(p: &mut P<'_, '_>) -> Result<Operand, LoadError> {
    let line = p.line();
    match p.next()? {
        Tok::Punct('[') => {
            let mut base = None;
            let mut off = 0i64;
            match p.peek() {
                Some(Tok::Word(w)) => {
                    p.next()?;
                    base = Some(w.to_string());
                }
                _ => off = signed_int(p)?,
            }
            while let Some(Tok::Punct(c @ ('+' | '-'))) = p.peek() {
                p.next()?;
                let v = signed_int(p)?;
                off = if c == '+' {
                    off.wrapping_add(v)
                } else {
                    off.wrapping_sub(v)
                };
            }
            p.expect(']')?;
            Ok(Operand::Addr(base, off))
        }
        Tok::Punct(open @ ('{' | '(')) => {
            let close = if open == '{' { '}' } else { ')' };
            let mut items = Vec::new();
            if !p.eat(close) {
                loop {
                    items.push(p.nested(line, operand)?);
                    if p.eat(close) {
                        break;
                    }
                    p.expect(',')?;
                }
            }
            Ok(if open == '{' {
                Operand::Vec(items)
            } else {
                Operand::List(items)
            })
        }
        Tok::Punct('!') => Ok(Operand::Not(Box::new(p.nested(line, operand)?))),
        Tok::Punct('-') => match p.next()? {
            Tok::Int(v) => Ok(Operand::Int(v.wrapping_neg())),
            Tok::Float(v) => Ok(Operand::Float(-v)),
            Tok::F32(b) => Ok(Operand::F32(b ^ 0x8000_0000)),
            Tok::F64(b) => Ok(Operand::F64(b ^ (1 << 63))),
            t => Err(err(
                line,
                format!("expected a number after `-`, found {}", show(t)),
            )),
        },
        Tok::Int(v) => Ok(Operand::Int(v)),
        Tok::F32(b) => Ok(Operand::F32(b)),
        Tok::F64(b) => Ok(Operand::F64(b)),
        Tok::Float(v) => Ok(Operand::Float(v)),
        Tok::Word("_") => Ok(Operand::Sink),
        Tok::Word(w) => {
            if p.eat('|') {
                let second = p.nested(line, operand)?;
                return Ok(Operand::Pair(
                    Box::new(Operand::Name(w.to_string())),
                    Box::new(second),
                ));
            }
            if let Some(Tok::Punct(c @ ('+' | '-'))) = p.peek() {
                p.next()?;
                let v = signed_int(p)?;
                return Ok(Operand::SymOff(
                    w.to_string(),
                    if c == '+' { v } else { v.wrapping_neg() },
                ));
            }
            Ok(Operand::Name(w.to_string()))
        }
        t => Err(err(line, format!("unexpected {} in operand", show(t)))),
    }
}
