//! Model data that is either owned or a window of a memory-mapped model file.
//!
//! A fresh `bib ask` process embeds one question. Reading a model's tensors into the heap
//! costs far more than the question: every byte is copied from the page cache and every fresh
//! page is faulted in and zeroed first. Mapping the file instead lets the kernel share the
//! page-cache pages, and touches only what the forward pass reads.

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

/// A read-only memory map of a whole model file.
#[derive(Clone)]
pub(crate) struct MappedFile(Arc<Mmap>);

impl MappedFile {
    /// Map `path` read-only. The workspace denies `unsafe`; this is its one exception.
    #[allow(unsafe_code)]
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::File::open(path)?;
        // SAFETY: a mapping is undefined behaviour only if the file changes underneath it.
        // bib never writes a model file in place: installs and re-packs write a temporary file
        // and rename it over the old one, so a live map keeps the old inode's bytes.
        let map = unsafe { Mmap::map(&file)? };
        Ok(Self(Arc::new(map)))
    }

    /// The mapped bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A slice of `T` words: an owned vector, or `len` words starting at byte `start` of a
/// mapped file (checked for bounds and alignment when made, so reading it cannot fail).
pub(crate) enum Words<T: 'static> {
    Owned(Vec<T>),
    Mapped {
        file: MappedFile,
        start: usize,
        len: usize,
    },
}

impl<T: bytemuck::Pod> Words<T> {
    /// The words at byte `start` of `file`, or `None` when they are out of bounds or not
    /// aligned for `T` there (the caller then copies them).
    pub(crate) fn mapped(file: &MappedFile, start: usize, len: usize) -> Option<Self> {
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        let window = file.bytes().get(start..start.checked_add(bytes)?)?;
        bytemuck::try_cast_slice::<u8, T>(window).ok()?;
        Some(Words::Mapped {
            file: file.clone(),
            start,
            len,
        })
    }

    /// Mapped when possible, else a copy decoded from little-endian bytes by `decode`.
    pub(crate) fn mapped_or_copied(
        file: &MappedFile,
        start: usize,
        len: usize,
        decode: impl Fn(&[u8]) -> Vec<T>,
    ) -> Option<Self> {
        if cfg!(target_endian = "little") {
            if let Some(w) = Self::mapped(file, start, len) {
                return Some(w);
            }
        }
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        let window = file.bytes().get(start..start.checked_add(bytes)?)?;
        Some(Words::Owned(decode(window)))
    }

    /// Whether the words are read from the map rather than copied.
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self, Words::Mapped { .. })
    }
}

impl<T: bytemuck::Pod> Deref for Words<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Words::Owned(v) => v,
            Words::Mapped { file, start, len } => {
                let bytes = &file.bytes()[*start..*start + *len * std::mem::size_of::<T>()];
                // Checked in `mapped`; the map never moves, so this cannot fail.
                bytemuck::try_cast_slice(bytes).unwrap_or(&[])
            }
        }
    }
}

/// Little-endian f32 words.
pub(crate) fn f32_le(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(bytes: &[u8]) -> (tempfile::TempDir, MappedFile) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.bin");
        std::fs::write(&p, bytes).unwrap();
        let f = MappedFile::open(&p).unwrap();
        (dir, f)
    }

    #[test]
    fn aligned_words_are_mapped_and_misaligned_ones_copied() {
        let mut bytes = vec![0u8; 3];
        for x in [1.5f32, -2.0, 3.25] {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        bytes.push(0);
        let (_d, f) = file_with(&bytes);
        // Offset 3 is not 4-aligned (the map itself is page-aligned).
        assert!(Words::<f32>::mapped(&f, 3, 3).is_none());
        let copied = Words::<f32>::mapped_or_copied(&f, 3, 3, f32_le).unwrap();
        assert!(!copied.is_mapped());
        assert_eq!(&*copied, &[1.5, -2.0, 3.25]);
        // Bytes are always aligned; out of bounds is refused.
        let b = Words::<u8>::mapped(&f, 3, 4).unwrap();
        assert!(b.is_mapped());
        assert_eq!(&*b, &1.5f32.to_le_bytes());
        assert!(Words::<u8>::mapped(&f, 10, 10).is_none());
        assert!(Words::<f32>::mapped_or_copied(&f, 3, 100, f32_le).is_none());
    }

    #[test]
    fn aligned_f32_words_read_through_the_map() {
        let mut bytes = Vec::new();
        for x in [0.5f32, 4.0] {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        let (_d, f) = file_with(&bytes);
        let w = Words::<f32>::mapped_or_copied(&f, 0, 2, f32_le).unwrap();
        assert!(w.is_mapped());
        assert_eq!(&*w, &[0.5, 4.0]);
    }
}
