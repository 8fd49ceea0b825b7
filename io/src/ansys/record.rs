//! Low-level reading of MAPDL binary records (layout in the module doc of [`crate::ansys`]).
//!
//! Written by hand: no maintained Rust crate reads MAPDL records, and the compressed forms
//! need their own decoder anyway.

use std::path::{Path, PathBuf};

use super::AnsysError;

const FLAG_INT: u32 = 1 << 31;
const FLAG_SHORT: u32 = 1 << 30;
const FLAG_WSPARSE: u32 = 1 << 28;
const FLAG_BSPARSE: u32 = 1 << 27;

/// A bounds-checked view of a whole result file.
pub(crate) struct Bytes<'a> {
    pub data: &'a [u8],
    pub file: &'a Path,
}

/// Where a decoded record was and what it held.
pub(crate) struct RecordInfo {
    /// Word offset of the record's leading length word.
    pub at: u64,
    /// Data words (the length word).
    pub words: usize,
    /// Whether the record held integers.
    pub is_int: bool,
}

impl<'a> Bytes<'a> {
    pub fn file(&self) -> PathBuf {
        self.file.to_path_buf()
    }

    pub fn bad(&self, word: u64, message: impl Into<String>) -> AnsysError {
        AnsysError::BadRecord { file: self.file(), offset: word * 4, message: message.into() }
    }

    /// The 32-bit word at word offset `w`.
    #[inline]
    pub fn word(&self, w: u64) -> Result<i32, AnsysError> {
        let b = w.saturating_mul(4);
        match usize::try_from(b).ok().and_then(|b| self.data.get(b..b.checked_add(4)?)) {
            Some(s) => Ok(i32::from_le_bytes([s[0], s[1], s[2], s[3]])),
            None => Err(AnsysError::Truncated {
                file: self.file(),
                offset: b.min(self.data.len() as u64),
                needed: (b + 4).saturating_sub(self.data.len() as u64),
            }),
        }
    }

    /// Check that a pointer (read at byte `from`) lands inside the file.
    pub fn check_ptr(&self, from: u64, ptr: u64) -> Result<u64, AnsysError> {
        if ptr == 0 || ptr.saturating_mul(4).saturating_add(8) > self.data.len() as u64 {
            return Err(AnsysError::PointerOutOfRange {
                file: self.file(),
                offset: from,
                pointer: ptr,
            });
        }
        Ok(ptr)
    }

    /// The header of the record at word `at`: (data words, flags), with both length words
    /// checked.
    fn header(&self, at: u64) -> Result<(usize, u32), AnsysError> {
        let n = self.word(at)?;
        let flags = self.word(at + 1)? as u32;
        if n < 0 {
            return Err(self.bad(at, format!("negative record length {n}")));
        }
        let end = at + 2 + n as u64;
        if end.saturating_mul(4).saturating_add(4) > self.data.len() as u64 {
            return Err(AnsysError::Truncated {
                file: self.file(),
                offset: at * 4,
                needed: (end * 4 + 4).saturating_sub(self.data.len() as u64),
            });
        }
        let trail = self.word(end)?;
        if trail != n {
            return Err(
                self.bad(at, format!("record length {n} words but trailing length word {trail}"))
            );
        }
        Ok((n as usize, flags))
    }

    /// Word offset of the record following the one at `at`.
    pub fn next_record(&self, at: u64) -> Result<u64, AnsysError> {
        let (n, _) = self.header(at)?;
        Ok(at + 3 + n as u64)
    }

    /// Raw data bytes of the record at `at`.
    fn body(&self, at: u64, n: usize) -> &'a [u8] {
        let s = (at as usize + 2) * 4;
        &self.data[s..s + 4 * n]
    }

    /// Decode the record at word `at` as integers (reals are rejected).
    pub fn ints(&self, at: u64) -> Result<(Vec<i32>, RecordInfo), AnsysError> {
        let (n, flags) = self.header(at)?;
        let info = RecordInfo { at, words: n, is_int: flags & FLAG_INT != 0 };
        if !info.is_int {
            return Err(self.bad(at, "expected an integer record, found reals"));
        }
        let body = self.body(at, n);
        let short = flags & FLAG_SHORT != 0;
        let v = self.decode(at, body, flags, if short { 2 } else { 4 }, |b| {
            if short {
                i16::from_le_bytes([b[0], b[1]]) as i32
            } else {
                i32::from_le_bytes([b[0], b[1], b[2], b[3]])
            }
        })?;
        Ok((v, info))
    }

    /// Decode the record at word `at` as reals (`f32` widened; integer records are rejected).
    pub fn reals(&self, at: u64) -> Result<(Vec<f64>, RecordInfo), AnsysError> {
        let (n, flags) = self.header(at)?;
        let info = RecordInfo { at, words: n, is_int: flags & FLAG_INT != 0 };
        if info.is_int {
            return Err(self.bad(at, "expected a real record, found integers"));
        }
        let body = self.body(at, n);
        let v = if flags & FLAG_SHORT != 0 {
            self.decode(at, body, flags, 4, |b| {
                f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64
            })?
        } else {
            self.decode(at, body, flags, 8, |b| {
                f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
            })?
        };
        Ok((v, info))
    }

    /// Decode plain, windowed-sparse or bit-mask-sparse data of `size`-byte values.
    fn decode<T: Copy + Default>(
        &self,
        at: u64,
        body: &[u8],
        flags: u32,
        size: usize,
        conv: impl Fn(&[u8]) -> T,
    ) -> Result<Vec<T>, AnsysError> {
        let w = |i: usize| -> Option<i32> {
            body.get(4 * i..4 * i + 4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        // A sparse record expands at most to 16 times the file (plus 1 MiB): caps allocations.
        let too_long = |len: i32| {
            len < 0 || (len as u64) * (size as u64) > 16 * self.data.len() as u64 + (1 << 20)
        };
        if flags & FLAG_BSPARSE != 0 {
            let len = w(0).ok_or_else(|| self.bad(at, "empty bit-mask sparse record"))?;
            if too_long(len) {
                return Err(self.bad(at, format!("bit-mask sparse length {len}")));
            }
            let len = len as usize;
            let nmask = len.div_ceil(32);
            let mut vals = 4 * (1 + nmask);
            if vals > body.len() {
                return Err(self.bad(at, "bit-mask sparse record shorter than its mask"));
            }
            let mut out = vec![T::default(); len];
            for (m, chunk) in out.chunks_mut(32).enumerate() {
                let mut mask = w(1 + m).unwrap_or(0) as u32;
                while mask != 0 {
                    let bit = mask.trailing_zeros() as usize;
                    mask &= mask - 1;
                    let Some(b) = body.get(vals..vals + size) else {
                        return Err(self.bad(at, "bit-mask sparse record shorter than its mask"));
                    };
                    if bit < chunk.len() {
                        chunk[bit] = conv(b);
                    }
                    vals += size;
                }
            }
            Ok(out)
        } else if flags & FLAG_WSPARSE != 0 {
            if size == 2 {
                return Err(self.bad(at, "windowed sparse record of short integers"));
            }
            let (Some(len), Some(nwin)) = (w(0), w(1)) else {
                return Err(self.bad(at, "windowed sparse record without its header"));
            };
            if too_long(len) || nwin < 0 {
                return Err(self.bad(at, format!("windowed sparse length {len}, {nwin} windows")));
            }
            let len = len as usize;
            let mut out = vec![T::default(); len];
            let mut p = 8usize; // byte position in body
            let err = || self.bad(at, "windowed sparse record overruns its data");
            let val = |p: usize| body.get(p..p + size).map(&conv);
            for _ in 0..nwin {
                let l = w(p / 4).ok_or_else(err)?;
                p += 4;
                if l > 0 {
                    let v = val(p).ok_or_else(err)?;
                    p += size;
                    *out.get_mut(l as usize).ok_or_else(err)? = v;
                } else {
                    let start = l.unsigned_abs() as usize;
                    let c = w(p / 4).ok_or_else(err)?;
                    p += 4;
                    if c >= 0 {
                        let c = c as usize;
                        let dst = out.get_mut(start..start.saturating_add(c)).ok_or_else(err)?;
                        for d in dst {
                            *d = val(p).ok_or_else(err)?;
                            p += size;
                        }
                    } else {
                        let v = val(p).ok_or_else(err)?;
                        p += size;
                        let c = c.unsigned_abs() as usize;
                        out.get_mut(start..start.saturating_add(c)).ok_or_else(err)?.fill(v);
                    }
                }
            }
            Ok(out)
        } else {
            Ok(body.chunks_exact(size).map(conv).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(words: &[i32], flags: u32) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(words.len() as i32).to_le_bytes());
        v.extend_from_slice(&flags.to_le_bytes());
        for w in words {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v.extend_from_slice(&(words.len() as i32).to_le_bytes());
        v
    }

    #[test]
    fn windowed_sparse_ints() {
        // len 8; window at 0 of 2 values, single at 5, 2 copies of 7 at 6
        let d = rec(&[8, 3, 0, 2, 1, 186, 5, 9, -6, -2, 7], FLAG_INT | FLAG_WSPARSE);
        let b = Bytes { data: &d, file: Path::new("t") };
        assert_eq!(b.ints(0).unwrap().0, vec![1, 186, 0, 0, 0, 9, 7, 7]);
    }

    #[test]
    fn short_integers_and_single_precision_reals() {
        // the element index record of beam_static_bc.rst: 25 short ints, bit-mask sparse
        let d = rec(
            &[
                25,
                0x0101_032F,
                0x0092_FFE6,
                0x00D1_000A,
                0xFFC0_003Du32 as i32,
                0xFFEC_FFFDu32 as i32,
                120,
            ],
            FLAG_INT | FLAG_SHORT | FLAG_BSPARSE,
        );
        let b = Bytes { data: &d, file: Path::new("t") };
        let v = b.ints(0).unwrap().0;
        assert_eq!(v.len(), 25);
        assert_eq!(
            (v[0], v[1], v[2], v[3], v[5], v[8], v[9], v[16], v[24]),
            (-26, 146, 10, 209, 61, -64, -3, -20, 120)
        );
        assert_eq!(v.iter().filter(|&&x| x != 0).count(), 9);
        let d = rec(&[1.5f32.to_bits() as i32, (-2.25f32).to_bits() as i32], FLAG_SHORT);
        let b = Bytes { data: &d, file: Path::new("t") };
        assert_eq!(b.reals(0).unwrap().0, vec![1.5, -2.25]);
    }

    #[test]
    fn bitmask_sparse_doubles_and_errors() {
        let one = 1.0f64.to_bits();
        let d = rec(&[7, 0b101, one as i32, (one >> 32) as i32, 0, 0x4000_0000], FLAG_BSPARSE);
        let b = Bytes { data: &d, file: Path::new("t") };
        assert_eq!(b.reals(0).unwrap().0, vec![1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
        assert!(matches!(b.ints(0), Err(AnsysError::BadRecord { .. })));
        let mut bad = d.clone();
        let n = bad.len();
        bad[n - 4] = 9; // trailing length disagrees
        let b = Bytes { data: &bad, file: Path::new("t") };
        assert!(matches!(b.reals(0), Err(AnsysError::BadRecord { offset: 0, .. })));
        let b = Bytes { data: &d[..n - 2], file: Path::new("t") };
        assert!(matches!(b.reals(0), Err(AnsysError::Truncated { .. })));
    }
}
