//! Cookie resolution. One test in this binary: it changes the environment.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use graft_net::{read_or_create_cookie_file, resolve_cookie, COOKIE_ENV, COOKIE_FILE};

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("graft-net-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn cookie_from_config_env_or_a_0600_file() {
    let home = temp_dir("home");
    std::env::set_var("HOME", &home);
    std::env::remove_var(COOKIE_ENV);

    // First use creates the file, mode 0600, with a random cookie.
    let c1 = resolve_cookie(None).unwrap();
    let path = home.join(COOKIE_FILE);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {:o}", mode & 0o777);
    assert_eq!(c1.len(), 20);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), c1);
    // Later uses read it.
    assert_eq!(resolve_cookie(None).unwrap(), c1);

    // The environment wins over the file, the configuration over both.
    std::env::set_var(COOKIE_ENV, "from-env");
    assert_eq!(resolve_cookie(None).unwrap(), "from-env");
    assert_eq!(resolve_cookie(Some("configured")).unwrap(), "configured");
    assert!(resolve_cookie(Some("")).is_err());
    std::env::remove_var(COOKIE_ENV);

    // Whitespace around a hand-written cookie is not part of it; an empty
    // file is an error.
    let other = home.join("other.cookie");
    std::fs::write(&other, "  hand written\n").unwrap();
    assert_eq!(read_or_create_cookie_file(&other).unwrap(), "hand written");
    std::fs::write(&other, "\n").unwrap();
    assert!(read_or_create_cookie_file(&other).is_err());

    std::fs::remove_dir_all(&home).unwrap();
}
