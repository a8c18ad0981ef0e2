//! A small reader of the parts of a 64-bit little-endian ELF shared library that say how
//! it links: its SONAME, its version definitions and the version of each exported
//! symbol. Enough to check the cdylib without binutils.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fmt;

/// What is wrong with a file that is not the ELF this reader understands.
#[derive(Debug)]
pub struct ElfError(pub String);

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ELF: {}", self.0)
    }
}

const SHT_DYNSYM: u32 = 11;
const SHT_DYNAMIC: u32 = 6;
const SHT_GNU_VERDEF: u32 = 0x6fff_fffd;
const SHT_GNU_VERSYM: u32 = 0x6fff_ffff;
const DT_SONAME: u64 = 14;
const VER_FLG_BASE: u16 = 1;

/// One exported (defined) dynamic symbol and its version.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct VersionedSymbol {
    /// The name.
    pub name: String,
    /// The version node, `None` for an unversioned (base) symbol.
    pub version: Option<String>,
    /// `name@@VERSION` (true) or the hidden `name@VERSION` (false).
    pub default: bool,
    /// `STT_OBJECT` (1) or `STT_FUNC` (2), …
    pub kind: u8,
}

/// The linking facts of a shared library.
#[derive(Debug)]
pub struct DynamicInfo {
    /// `DT_SONAME`.
    pub soname: Option<String>,
    /// The version definitions, the base (file name) one excluded.
    pub versions: Vec<String>,
    /// The defined dynamic symbols.
    pub symbols: BTreeSet<VersionedSymbol>,
}

struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: usize,
    info: usize,
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn get(&self, at: usize, n: usize) -> Result<&[u8], ElfError> {
        at.checked_add(n)
            .and_then(|end| self.0.get(at..end))
            .ok_or_else(|| ElfError(format!("{n} bytes at {at:#x} lie past the end")))
    }
    fn u16(&self, at: usize) -> Result<u16, ElfError> {
        Ok(u16::from_le_bytes(self.get(at, 2)?.try_into().unwrap()))
    }
    fn u32(&self, at: usize) -> Result<u32, ElfError> {
        Ok(u32::from_le_bytes(self.get(at, 4)?.try_into().unwrap()))
    }
    fn u64(&self, at: usize) -> Result<u64, ElfError> {
        Ok(u64::from_le_bytes(self.get(at, 8)?.try_into().unwrap()))
    }
    fn usize(&self, at: usize) -> Result<usize, ElfError> {
        usize::try_from(self.u64(at)?).map_err(|_| ElfError(format!("offset at {at:#x}")))
    }
    fn cstr(&self, at: usize) -> Result<String, ElfError> {
        let tail = self
            .0
            .get(at..)
            .ok_or_else(|| ElfError(format!("string at {at:#x}")))?;
        let end = tail
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| ElfError(format!("unterminated string at {at:#x}")))?;
        Ok(String::from_utf8_lossy(&tail[..end]).into_owned())
    }
}

/// Reads `data`, the bytes of an ELF64 little-endian shared library.
///
/// # Errors
/// [`ElfError`] when it is not one, or a table points outside the file.
pub fn read(data: &[u8]) -> Result<DynamicInfo, ElfError> {
    let b = Bytes(data);
    if b.get(0, 6)? != b"\x7fELF\x02\x01" {
        return Err(ElfError("not a 64-bit little-endian ELF file".into()));
    }
    let shoff = b.usize(0x28)?;
    let shentsize = usize::from(b.u16(0x3a)?);
    let shnum = usize::from(b.u16(0x3c)?);
    let mut sections = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let at = shoff + i * shentsize;
        sections.push(Section {
            kind: b.u32(at + 4)?,
            offset: b.usize(at + 24)?,
            size: b.usize(at + 32)?,
            link: b.u32(at + 40)? as usize,
            info: b.u32(at + 44)? as usize,
        });
    }
    let find = |kind| sections.iter().find(|s| s.kind == kind);
    let strtab = |s: &Section| {
        sections
            .get(s.link)
            .map(|t| t.offset)
            .ok_or_else(|| ElfError("a string table link is out of range".into()))
    };

    let mut soname = None;
    if let Some(dynamic) = find(SHT_DYNAMIC) {
        let strs = strtab(dynamic)?;
        for at in (dynamic.offset..dynamic.offset + dynamic.size).step_by(16) {
            if b.u64(at)? == DT_SONAME {
                soname = Some(b.cstr(strs + b.usize(at + 8)?)?);
            }
        }
    }

    // Version index -> name, from the definitions.
    let mut names = std::collections::HashMap::new();
    let mut versions = Vec::new();
    if let Some(verdef) = find(SHT_GNU_VERDEF) {
        let strs = strtab(verdef)?;
        let mut at = verdef.offset;
        for _ in 0..verdef.info {
            let flags = b.u16(at + 2)?;
            let index = b.u16(at + 4)?;
            let aux = at + b.u32(at + 12)? as usize;
            let name = b.cstr(strs + b.u32(aux)? as usize)?;
            if flags & VER_FLG_BASE == 0 {
                versions.push(name.clone());
            }
            names.insert(index, name);
            let next = b.u32(at + 16)? as usize;
            if next == 0 {
                break;
            }
            at += next;
        }
    }

    let mut symbols = BTreeSet::new();
    let dynsym = find(SHT_DYNSYM).ok_or_else(|| ElfError("no .dynsym".into()))?;
    let versym = find(SHT_GNU_VERSYM);
    let strs = strtab(dynsym)?;
    for i in 1..dynsym.size / 24 {
        let at = dynsym.offset + i * 24;
        if b.u16(at + 6)? == 0 {
            continue; // undefined: a reference, not an export
        }
        let name = b.cstr(strs + b.u32(at)? as usize)?;
        let kind = b.get(at + 4, 1)?[0] & 0xf;
        let raw = match versym {
            Some(v) => b.u16(v.offset + 2 * i)?,
            None => 1,
        };
        let index = raw & 0x7fff;
        let version = if index <= 1 {
            None
        } else {
            Some(
                names
                    .get(&index)
                    .cloned()
                    .ok_or_else(|| ElfError(format!("{name}: version index {index} undefined")))?,
            )
        };
        symbols.insert(VersionedSymbol {
            name,
            version,
            default: raw & 0x8000 == 0,
            kind,
        });
    }
    Ok(DynamicInfo {
        soname,
        versions,
        symbols,
    })
}

#[test]
fn refuses_what_is_not_elf64() {
    assert!(read(b"#!/bin/sh\n").is_err());
    assert!(read(b"\x7fELF\x02\x01").is_err(), "a header cut short");
}
