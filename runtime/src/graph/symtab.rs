//! A small reader of the function symbols of an ELF64 little-endian file
//! (x86_64, aarch64): just enough of the format to list the `.symtab`
//! section, with every offset and length checked against the file. No
//! `unsafe`: the file is read with positioned reads into owned buffers.
//!
//! It is read once per process (see `code.rs`), from this program's own
//! executable, never from data a peer sent.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Section type of a full symbol table.
const SHT_SYMTAB: u32 = 2;
/// Section type of a string table.
const SHT_STRTAB: u32 = 3;
/// Symbol type of a function.
const STT_FUNC: u8 = 2;
/// Size of an ELF64 section header.
const SHDR_SIZE: usize = 64;
/// Size of an ELF64 symbol.
const SYM_SIZE: usize = 24;
/// Largest symbol or string table read (a debug build of a large program
/// has a few tens of MiB).
const MAX_TABLE: u64 = 1 << 30;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Reads `len` bytes at `offset` of `file`, checked against its length.
fn read_at(file: &File, file_len: u64, offset: u64, len: u64) -> Result<Vec<u8>, String> {
    let end = offset
        .checked_add(len)
        .ok_or("section extends beyond the file")?;
    if end > file_len || len > MAX_TABLE {
        return Err(format!(
            "section at {offset:#x} of {len} bytes does not fit the file"
        ));
    }
    let mut buf = vec![0; len as usize];
    file.read_exact_at(&mut buf, offset)
        .map_err(|e| format!("read at {offset:#x}: {e}"))?;
    Ok(buf)
}

/// Calls `each(name, value)` for every defined function symbol of the ELF
/// file `file` (the `value` is the symbol's address in the file's own
/// address space, before any load bias).
///
/// # Errors
///
/// A readable reason when the file is not an ELF64 little-endian file, is
/// malformed, or has no symbol table (it was stripped).
pub(crate) fn functions(file: &File, mut each: impl FnMut(&[u8], u64)) -> Result<(), String> {
    let file_len = file.metadata().map_err(|e| format!("stat: {e}"))?.len();
    let header = read_at(file, file_len, 0, 64)?;
    if header[..4] != *b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if header[4] != 2 || header[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let bad = || "malformed ELF header".to_string();
    let shoff = u64_at(&header, 40).ok_or_else(bad)?;
    let shentsize = u16_at(&header, 58).ok_or_else(bad)? as usize;
    let mut shnum = u64::from(u16_at(&header, 60).ok_or_else(bad)?);
    if shoff == 0 {
        return Err("no section headers (the executable was stripped)".into());
    }
    if shentsize != SHDR_SIZE {
        return Err(format!("unexpected section header size {shentsize}"));
    }
    if shnum == 0 {
        // More than 0xff00 sections: the count is in section 0's size.
        let first = read_at(file, file_len, shoff, SHDR_SIZE as u64)?;
        shnum = u64_at(&first, 32).ok_or_else(bad)?;
    }
    let shdrs = read_at(
        file,
        file_len,
        shoff,
        shnum.saturating_mul(SHDR_SIZE as u64),
    )?;
    let section = |i: usize| -> Option<(u32, u64, u64, u32, u64)> {
        let at = i.checked_mul(SHDR_SIZE)?;
        Some((
            u32_at(&shdrs, at + 4)?,  // sh_type
            u64_at(&shdrs, at + 24)?, // sh_offset
            u64_at(&shdrs, at + 32)?, // sh_size
            u32_at(&shdrs, at + 40)?, // sh_link
            u64_at(&shdrs, at + 56)?, // sh_entsize
        ))
    };
    let symtab = (0..shnum as usize)
        .filter_map(section)
        .find(|s| s.0 == SHT_SYMTAB)
        .ok_or("no symbol table (the executable was stripped)")?;
    let (_, sym_off, sym_size, link, entsize) = symtab;
    if entsize != SYM_SIZE as u64 {
        return Err(format!("unexpected symbol size {entsize}"));
    }
    let (str_type, str_off, str_size, _, _) = section(link as usize)
        .filter(|_| u64::from(link) < shnum)
        .ok_or("symbol table names no string table")?;
    if str_type != SHT_STRTAB {
        return Err("symbol table's string table has the wrong type".into());
    }
    let syms = read_at(file, file_len, sym_off, sym_size)?;
    let strs = read_at(file, file_len, str_off, str_size)?;
    for sym in syms.chunks_exact(SYM_SIZE) {
        let (Some(name), Some(shndx), Some(value)) =
            (u32_at(sym, 0), u16_at(sym, 6), u64_at(sym, 8))
        else {
            continue;
        };
        if sym[4] & 0xf != STT_FUNC || shndx == 0 || value == 0 {
            continue;
        }
        let Some(rest) = strs.get(name as usize..) else {
            continue;
        };
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        each(&rest[..end], value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_executable_has_functions() {
        let exe = File::open("/proc/self/exe").unwrap();
        let mut n = 0;
        functions(&exe, |_, _| n += 1).unwrap();
        assert!(n > 100, "{n} functions");
    }

    #[test]
    fn garbage_is_refused() {
        let dir = std::env::temp_dir().join(format!("graft-symtab-{}", std::process::id()));
        for (i, bytes) in [
            &b"not elf at all, but long enough for a header........................"[..],
            b"\x7fELF",
            &[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]
                .iter()
                .chain([0xffu8; 48].iter())
                .copied()
                .collect::<Vec<u8>>(),
        ]
        .into_iter()
        .enumerate()
        {
            let path = dir.with_extension(i.to_string());
            std::fs::write(&path, bytes).unwrap();
            let f = File::open(&path).unwrap();
            assert!(functions(&f, |_, _| {}).is_err());
            let _ = std::fs::remove_file(&path);
        }
    }
}
