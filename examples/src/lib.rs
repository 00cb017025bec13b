//! Shared helpers for the example programs.

use std::net::SocketAddr;

/// Command-line options shared by the node programs: `--name N`,
/// `--listen ADDR`, `--join ADDR`, `--cookie C`, plus any other flags.
#[derive(Debug, Clone, Default)]
pub struct NodeArgs {
    /// `--name`
    pub name: Option<String>,
    /// `--listen` (default `127.0.0.1:0`)
    pub listen: Option<String>,
    /// `--join`
    pub join: Option<SocketAddr>,
    /// `--cookie`
    pub cookie: Option<String>,
    /// Every other `--flag value` pair, in order.
    pub rest: Vec<(String, String)>,
}

impl NodeArgs {
    /// Parses `--flag value` pairs (a flag without a value gets `""`).
    ///
    /// # Errors
    ///
    /// A message naming a bad `--join` address.
    ///
    /// ```
    /// let a = graft_examples::NodeArgs::parse(["--name", "n1", "--join", "127.0.0.1:4000", "--x"].map(String::from)).unwrap();
    /// assert_eq!(a.name.as_deref(), Some("n1"));
    /// assert_eq!(a.rest, vec![("--x".to_string(), String::new())]);
    /// ```
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<NodeArgs, String> {
        let mut out = NodeArgs::default();
        let mut it = args.into_iter().peekable();
        while let Some(flag) = it.next() {
            let value = match it.peek() {
                Some(v) if !v.starts_with("--") => it.next().unwrap_or_default(),
                _ => String::new(),
            };
            match flag.as_str() {
                "--name" => out.name = Some(value),
                "--listen" => out.listen = Some(value),
                "--cookie" => out.cookie = Some(value),
                "--join" => {
                    out.join = Some(
                        value
                            .parse()
                            .map_err(|e| format!("--join {value:?}: {e}"))?,
                    )
                }
                _ => out.rest.push((flag, value)),
            }
        }
        Ok(out)
    }

    /// Parses this program's arguments; on a bad one, prints it (prefixed
    /// with `program`) and exits with status 2.
    pub fn from_env(program: &str) -> NodeArgs {
        NodeArgs::parse(std::env::args().skip(1)).unwrap_or_else(|e| {
            eprintln!("{program}: {e}");
            std::process::exit(2)
        })
    }

    /// The value of another flag.
    pub fn get(&self, flag: &str) -> Option<&str> {
        self.rest
            .iter()
            .find(|(f, _)| f == flag)
            .map(|(_, v)| v.as_str())
    }

    /// The value of another flag as a number (`_` separators allowed);
    /// `None` if absent or not a number.
    ///
    /// ```
    /// let a = graft_examples::NodeArgs::parse(["--to", "2_000", "--x", "y"].map(String::from)).unwrap();
    /// assert_eq!(a.num::<u64>("--to"), Some(2000));
    /// assert_eq!(a.num::<u64>("--x"), None);
    /// ```
    pub fn num<T: std::str::FromStr>(&self, flag: &str) -> Option<T> {
        self.get(flag)?.replace('_', "").parse().ok()
    }

    /// A node configuration from these options.
    pub fn config(&self) -> graft::NodeConfig {
        let mut c = graft::NodeConfig::new(self.listen.as_deref().unwrap_or("127.0.0.1:0"));
        if let Some(n) = &self.name {
            c = c.name(n);
        }
        if let Some(k) = &self.cookie {
            c = c.cookie(k);
        }
        c
    }
}

pub mod microsync;
pub mod shared_code;
pub mod top;
pub mod work_pool;
