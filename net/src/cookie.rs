//! The shared secret (the cookie), the key derived from it, and random bytes.
//!
//! The cookie never crosses the wire: both sides derive the Noise
//! handshake's pre-shared key from it with `blake3::derive_key`, and prove
//! they know it in the handshake (see `handshake.rs`).

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Environment variable consulted when no cookie is configured.
pub const COOKIE_ENV: &str = "GRAFT_COOKIE";

/// File name, in the home directory, of the per-user cookie file.
pub const COOKIE_FILE: &str = ".graft.cookie";

/// Finds the cookie the way Erlang does: the configured one, else the
/// `GRAFT_COOKIE` environment variable, else the per-user file
/// `$HOME/.graft.cookie`, which is created (mode 0600, 20 random capital
/// letters) on first use.
///
/// # Examples
///
/// ```
/// assert_eq!(graft_net::resolve_cookie(Some("secret")).unwrap(), "secret");
/// ```
///
/// # Errors
///
/// An empty configured cookie or cookie file, `$HOME` not set, or the file
/// cannot be read or created.
pub fn resolve_cookie(configured: Option<&str>) -> io::Result<String> {
    if let Some(c) = configured {
        return non_empty(c.to_owned(), "the configured cookie");
    }
    if let Ok(c) = std::env::var(COOKIE_ENV) {
        if !c.is_empty() {
            return Ok(c);
        }
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no cookie configured, GRAFT_COOKIE unset and HOME unset",
            )
        })?;
    read_or_create_cookie_file(&PathBuf::from(home).join(COOKIE_FILE))
}

/// Reads the cookie in `path`, or, if there is no such file, creates it with
/// mode 0600 and a random cookie. Leading and trailing whitespace is not
/// part of the cookie. Logs a warning if the file can be read by others.
///
/// Safe against concurrent first use (several nodes of one user starting at
/// once): the new cookie is written and synced in a private temporary file
/// beside `path` and then hard-linked into place, which fails if `path`
/// exists. So `path` only ever appears whole, and every racer reads the one
/// cookie that won.
///
/// # Examples
///
/// ```
/// let dir = std::env::temp_dir().join(format!("graft-cookie-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("cookie");
/// let first = graft_net::read_or_create_cookie_file(&path).unwrap();
/// assert_eq!(graft_net::read_or_create_cookie_file(&path).unwrap(), first);
/// std::fs::remove_dir_all(&dir).unwrap();
/// ```
///
/// # Errors
///
/// The file cannot be read or created, or holds only whitespace.
pub fn read_or_create_cookie_file(path: &Path) -> io::Result<String> {
    match read_cookie_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }
    let cookie = random_cookie();
    let tmp = temp_beside(path);
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(cookie.as_bytes())?;
        f.sync_all()?;
        fs::hard_link(&tmp, path)
    })();
    let _ = fs::remove_file(&tmp);
    match written {
        Ok(()) => {
            log::info!("graft-net: created cookie file {}", path.display());
            Ok(cookie)
        }
        // Another process or thread created it first: theirs is whole.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => read_cookie_file(path),
        Err(e) => Err(e),
    }
}

/// A name for the temporary file beside `path`, unique per process and call.
fn temp_beside(path: &Path) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".tmp.{}.{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    path.with_file_name(name)
}

fn read_cookie_file(path: &Path) -> io::Result<String> {
    let mut f = fs::File::open(path)?;
    let mode = f.metadata()?.permissions().mode();
    if mode & 0o077 != 0 {
        log::warn!(
            "graft-net: cookie file {} has mode {:o}; it should be 0600",
            path.display(),
            mode & 0o777
        );
    }
    let mut s = String::new();
    f.read_to_string(&mut s)?;
    non_empty(s.trim().to_owned(), "the cookie file")
}

fn non_empty(c: String, what: &str) -> io::Result<String> {
    if c.is_empty() {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{what} is empty"),
        ))
    } else {
        Ok(c)
    }
}

/// 20 capital letters, as Erlang's generated cookies.
fn random_cookie() -> String {
    random_bytes()[..20]
        .iter()
        .map(|b| char::from(b'A' + b % 26))
        .collect()
}

/// 32 unpredictable bytes: the system's random source (`getrandom`, one
/// system call, through ring) when it answers, always mixed with the time,
/// the process id, a counter and a stack address.
pub(crate) fn random_bytes() -> [u8; 32] {
    use ring::rand::SecureRandom;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = blake3::Hasher::new();
    let mut os = [0u8; 32];
    if ring::rand::SystemRandom::new().fill(&mut os).is_ok() {
        h.update(&os);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.update(&now.to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let local = 0u8;
    h.update(&(std::ptr::addr_of!(local) as usize).to_le_bytes());
    h.update(format!("{:?}", std::thread::current().id()).as_bytes());
    *h.finalize().as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_bytes_differ() {
        assert_ne!(random_bytes(), random_bytes());
        let c = random_cookie();
        assert_eq!(c.len(), 20);
        assert!(c.bytes().all(|b| b.is_ascii_uppercase()));
    }

    /// Many first users at once (nodes of one user starting together, as the
    /// test suite does on a fresh machine): each must read the one whole
    /// cookie, never an empty or partial file. The old create-then-write
    /// order failed this with "the cookie file is empty".
    #[test]
    fn concurrent_first_use_agrees_on_one_whole_cookie() {
        let dir = std::env::temp_dir().join(format!("graft-cookie-race-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for round in 0..50 {
            let path = dir.join(format!("cookie{round}"));
            let start = std::sync::Arc::new(std::sync::Barrier::new(8));
            let got: Vec<String> = (0..8)
                .map(|_| {
                    let (path, start) = (path.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        read_or_create_cookie_file(&path)
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|t| t.join().unwrap().expect("every racer reads a cookie"))
                .collect();
            assert_eq!(got[0].len(), 20);
            assert!(got.iter().all(|c| *c == got[0]), "round {round}: {got:?}");
        }
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().contains(".tmp."))
            .collect();
        assert!(left.is_empty(), "temporary files left: {left:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_depend_on_the_cookie() {
        use crate::handshake::psk;
        assert_eq!(psk("a"), psk("a"));
        assert_ne!(psk("a"), psk("b"));
    }
}
