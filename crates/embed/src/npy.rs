//! Reading NumPy `.npz` archives (a zip of `.npy` files) into plain vectors.
//!
//! Only what model files need: little-endian `f4`, `f8`, `u1` and `i1` arrays in C order.

use std::collections::HashMap;
use std::io::Read;

use crate::EmbedError;

/// One array: its shape and its elements, widened to a common representation.
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    U8(Vec<u8>),
    I8(Vec<i8>),
}

/// A decoded `.npy` array.
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    pub shape: Vec<usize>,
    pub data: NpyData,
}

impl NpyArray {
    /// Number of elements the shape implies.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn bad(path: &str, reason: impl Into<String>) -> EmbedError {
    EmbedError::BadModelFile {
        path: path.to_string(),
        reason: reason.into(),
    }
}

/// Parse one `.npy` file; `name` only labels errors.
pub fn parse_npy(bytes: &[u8], name: &str) -> Result<NpyArray, EmbedError> {
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad(name, "missing .npy magic"));
    }
    let (header_len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(name, format!("unsupported .npy version {v}"))),
    };
    let header = bytes
        .get(start..start + header_len)
        .ok_or_else(|| bad(name, "truncated .npy header"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad(name, "header is not text"))?;
    let descr = dict_value(header, "descr").ok_or_else(|| bad(name, "header lacks descr"))?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let fortran = dict_value(header, "fortran_order").unwrap_or("False");
    if fortran.starts_with("True") {
        return Err(bad(name, "Fortran-ordered arrays are not supported"));
    }
    let shape_text = dict_value(header, "shape").ok_or_else(|| bad(name, "header lacks shape"))?;
    let shape = parse_shape(shape_text).ok_or_else(|| bad(name, "unreadable shape"))?;
    let count: usize = shape.iter().product();
    let body = &bytes[start + header_len..];
    let need = |width: usize| -> Result<&[u8], EmbedError> {
        body.get(..count * width)
            .ok_or_else(|| bad(name, format!("data shorter than shape {shape:?}")))
    };
    let data = match descr {
        "<f4" => NpyData::F32(
            need(4)?
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        "<f8" => NpyData::F64(
            need(8)?
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .collect(),
        ),
        "|u1" => NpyData::U8(need(1)?.to_vec()),
        "|i1" => NpyData::I8(need(1)?.iter().map(|&b| b as i8).collect()),
        other => return Err(bad(name, format!("unsupported dtype {other}"))),
    };
    Ok(NpyArray { shape, data })
}

/// The raw text of `key`'s value in the Python-dict header (up to the next top-level comma).
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header.find(&format!("'{key}'"))?;
    let rest = header[at + key.len() + 2..]
        .trim_start()
        .strip_prefix(':')?
        .trim_start();
    if rest.starts_with('(') {
        let end = rest.find(')')?;
        return Some(&rest[..=end]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

fn parse_shape(text: &str) -> Option<Vec<usize>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}

/// Read every array of an `.npz` archive held in memory, keyed by name without `.npy`.
pub fn read_npz(bytes: &[u8], name: &str) -> Result<HashMap<String, NpyArray>, EmbedError> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
        .map_err(|e| EmbedError::failed(format!("{name} is not a zip archive"), e))?;
    let mut out = HashMap::new();
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| EmbedError::failed(format!("{name}: zip entry {i}"), e))?;
        let entry_name = entry.name().to_string();
        let mut buf = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut buf)
            .map_err(|e| EmbedError::failed(format!("{name}: reading {entry_name}"), e))?;
        let array = parse_npy(&buf, &format!("{name}:{entry_name}"))?;
        let key = entry_name
            .strip_suffix(".npy")
            .unwrap_or(&entry_name)
            .to_string();
        out.insert(key, array);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn parses_f32_matrix_and_scalar() {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let a = parse_npy(&npy("<f4", "(2, 3)", &data), "t").unwrap();
        assert_eq!(a.shape, vec![2, 3]);
        assert_eq!(a.data, NpyData::F32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        let s = parse_npy(&npy("<f8", "()", &0.5f64.to_le_bytes()), "t").unwrap();
        assert_eq!(s.shape, Vec::<usize>::new());
        assert_eq!(s.data, NpyData::F64(vec![0.5]));
        let v = parse_npy(&npy("|u1", "(3,)", &[7, 8, 9]), "t").unwrap();
        assert_eq!(v.data, NpyData::U8(vec![7, 8, 9]));
    }

    #[test]
    fn rejects_short_or_foreign_data() {
        assert!(parse_npy(&npy("<f4", "(2, 3)", &[0; 8]), "t").is_err());
        assert!(parse_npy(&npy("<c8", "(1,)", &[0; 8]), "t").is_err());
        assert!(parse_npy(b"not numpy at all", "t").is_err());
        assert!(read_npz(b"nope", "t").is_err());
    }
}
