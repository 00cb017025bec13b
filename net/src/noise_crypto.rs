//! The handshake's crypto for `snow`: X25519 from `ring` (already the TLS
//! provider), the hash and cipher functions from snow's default resolver.
//!
//! snow's default X25519 is curve25519-dalek's portable 64-bit code; ring's
//! (BoringSSL's, with ADX/BMI2 assembly where the CPU has it) does the same
//! four X25519 operations of an `NNpsk0` handshake in well under half the
//! time here (see `docs/decisions.md`). Only ephemeral keys exist in
//! `NNpsk0`, and ring's `EphemeralPrivateKey` fits them exactly: it is made
//! from the system's random source, never leaves ring (no bytes of it are
//! exposed), and is consumed by its one Diffie-Hellman, so each ephemeral
//! key is used once and dropped with its handshake (forward secrecy as
//! with the default resolver).
//!
//! Making a key pair (a fixed-base scalar multiplication) is about as dear
//! as the Diffie-Hellman itself, so it is done ahead of need: a small
//! process-wide pool ([`POOL_SIZE`] key pairs) refilled by one background
//! thread (`graft-net-keys`, parked while the pool is full). A handshake
//! takes a key pair out of the pool (so each is used by one handshake,
//! once) or, when the pool is empty or its lock is held, makes its own (it
//! never waits for the idle-priority thread). A stranger cannot
//! drain the pool: the acceptor makes its ephemeral key only after the
//! initiator's first message opened with the cookie's key. What the pool
//! changes for forward secrecy: at most [`POOL_SIZE`] not-yet-used private
//! keys wait in memory, as the live handshakes' keys do; they are never
//! written anywhere, and, as with snow's default resolver, not zeroised
//! when dropped (ring does not promise it).

use std::sync::OnceLock;

use parking_lot::{Condvar, Mutex};
use ring::agreement::{agree_ephemeral, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use snow::params::{CipherChoice, DHChoice, HashChoice};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};

/// snow's default resolver with ring's X25519.
#[derive(Debug, Default)]
pub(crate) struct Resolver;

impl CryptoResolver for Resolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        DefaultResolver.resolve_rng()
    }

    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        match choice {
            DHChoice::Curve25519 => Some(Box::new(Ephemeral25519::default())),
            _ => DefaultResolver.resolve_dh(choice),
        }
    }

    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }

    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

/// Key pairs made ahead of need.
pub(crate) const POOL_SIZE: usize = 4;

/// The pool of key pairs and its refilling thread.
struct Pool {
    keys: Mutex<Vec<(EphemeralPrivateKey, [u8; 32])>>,
    /// Signalled when a key pair is taken.
    taken: Condvar,
}

/// The pool, its thread started on first use; `None` if the thread could
/// not be started (every handshake then makes its own keys).
fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<&'static Pool>> = OnceLock::new();
    *POOL.get_or_init(|| {
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            keys: Mutex::new(Vec::with_capacity(POOL_SIZE)),
            taken: Condvar::new(),
        }));
        let started = std::thread::Builder::new()
            .name("graft-net-keys".into())
            .stack_size(64 << 10)
            .spawn(move || pool.refill());
        match started {
            Ok(_) => Some(pool),
            Err(e) => {
                log::warn!("graft-net: no key pool thread ({e}); keys made in each handshake");
                None
            }
        }
    })
}

impl Pool {
    /// The refilling thread: keeps the pool full, forever. It is
    /// precomputation, so it runs only on CPU time nothing else wants
    /// (`SCHED_IDLE`): a thread that wakes on its core (a handshake's next
    /// step, a process) preempts it at once instead of waiting for its
    /// turn. Starved, the pool empties and a handshake makes its key
    /// itself, as without a pool.
    fn refill(&self) {
        background_priority();
        loop {
            {
                let mut keys = self.keys.lock();
                while keys.len() >= POOL_SIZE {
                    self.taken.wait(&mut keys);
                }
            }
            // Made outside the lock, so a handshake never waits for it.
            match make_key() {
                Some(k) => self.keys.lock().push(k),
                None => std::thread::sleep(std::time::Duration::from_millis(100)),
            }
        }
    }

    /// A key pair from the pool; `None` when it is empty or its lock is
    /// held. Never waits: the lock's other user is the refilling thread,
    /// at `SCHED_IDLE`, which on a saturated machine can be preempted
    /// holding it and not run again for seconds, while every handshake of
    /// the process (on the acceptor's side, its node's I/O thread) waited
    /// behind it. That fits what a 1,000-node cluster forming on two
    /// cores showed (one hosting process with a quarter of the others'
    /// CPU, its nodes idle, most never getting a neighbour), though no
    /// stack showed it (docs/decisions.md).
    fn take(&self) -> Option<(EphemeralPrivateKey, [u8; 32])> {
        let k = self.keys.try_lock()?.pop();
        if k.is_some() {
            self.taken.notify_one();
        }
        k
    }
}

/// Moves the calling thread to `SCHED_IDLE` (Linux; elsewhere nothing).
fn background_priority() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `sched_setscheduler` reads one `sched_param` through a
        // valid pointer; pid 0 is the calling thread. Lowering one's own
        // policy needs no privilege; a failure leaves the policy as it was.
        #[allow(unsafe_code)]
        let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        if r != 0 {
            log::debug!(
                "graft-net: the key pool thread keeps its priority: {}",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// A fresh key pair from the system's random source.
fn make_key() -> Option<(EphemeralPrivateKey, [u8; 32])> {
    let rng = ring::rand::SystemRandom::new();
    let k = EphemeralPrivateKey::generate(&X25519, &rng).ok()?;
    let public = k.compute_public_key().ok()?;
    let mut p = [0u8; 32];
    p.copy_from_slice(public.as_ref());
    Some((k, p))
}

/// An ephemeral X25519 key in ring: generated, then consumed by its one
/// Diffie-Hellman. Static keys are not supported (`NNpsk0` has none): a
/// `set` leaves no key, and a Diffie-Hellman without a key fails.
#[derive(Default)]
struct Ephemeral25519 {
    key: Mutex<Option<EphemeralPrivateKey>>,
    public: [u8; 32],
}

impl Dh for Ephemeral25519 {
    fn name(&self) -> &'static str {
        "25519"
    }

    fn pub_len(&self) -> usize {
        32
    }

    fn priv_len(&self) -> usize {
        32
    }

    fn set(&mut self, _privkey: &[u8]) {
        // A static key: not used by NNpsk0; refuse to pretend.
        *self.key.get_mut() = None;
        self.public = [0; 32];
    }

    fn generate(&mut self, _rng: &mut dyn Random) {
        match pool().and_then(Pool::take).or_else(make_key) {
            Some((k, public)) => {
                self.public = public;
                *self.key.get_mut() = Some(k);
            }
            None => {
                // No key: the Diffie-Hellman that needs it fails.
                log::error!("graft-net: cannot generate an X25519 key");
                *self.key.get_mut() = None;
                self.public = [0; 32];
            }
        }
    }

    fn pubkey(&self) -> &[u8] {
        &self.public
    }

    /// ring never exposes an ephemeral private key.
    fn privkey(&self) -> &[u8] {
        &[]
    }

    fn dh(&self, pubkey: &[u8], out: &mut [u8]) -> Result<(), snow::Error> {
        let key = self.key.lock().take().ok_or(snow::Error::Dh)?;
        let (Some(theirs), Some(out)) = (pubkey.get(..32), out.get_mut(..32)) else {
            return Err(snow::Error::Dh);
        };
        // ring refuses a peer key whose shared secret is all zeros (a
        // low-order point), as the Noise specification allows.
        agree_ephemeral(key, &UnparsedPublicKey::new(&X25519, theirs), |s| {
            out.copy_from_slice(s)
        })
        .map_err(|_| snow::Error::Dh)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A handshake never waits for the key pool's lock (its holder, the
    /// refilling thread, runs at idle priority and may not run for
    /// seconds): it makes its own key pair instead.
    #[test]
    fn a_key_is_made_while_the_pool_is_locked() {
        let pool = pool().expect("the pool's thread");
        let held = pool.keys.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut dh = Ephemeral25519::default();
            dh.generate(&mut *DefaultResolver.resolve_rng().unwrap());
            tx.send(dh.public).unwrap();
        });
        let public = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("a key made without the pool's lock");
        assert_ne!(public, [0u8; 32]);
        drop(held);
    }

    fn pair(resolver: impl Fn() -> Box<dyn CryptoResolver + Send>) -> ([u8; 32], [u8; 32]) {
        let params: snow::params::NoiseParams = crate::handshake::NOISE.parse().unwrap();
        let psk = [7u8; 32];
        let mut i = snow::Builder::with_resolver(params.clone(), resolver())
            .psk(0, &psk)
            .build_initiator()
            .unwrap();
        let mut r = snow::Builder::with_resolver(params, resolver())
            .psk(0, &psk)
            .build_responder()
            .unwrap();
        let (mut m, mut p) = ([0u8; 256], [0u8; 256]);
        let n = i.write_message(b"hi", &mut m).unwrap();
        r.read_message(&m[..n], &mut p).unwrap();
        let n = r.write_message(b"ho", &mut m).unwrap();
        i.read_message(&m[..n], &mut p).unwrap();
        let (a, b) = (
            i.get_handshake_hash().to_vec(),
            r.get_handshake_hash().to_vec(),
        );
        (a.try_into().unwrap(), b.try_into().unwrap())
    }

    /// ring's X25519 interoperates with snow's default (dalek) one, in
    /// both roles: the same transcript and keys on both sides.
    #[test]
    fn ring_x25519_agrees_with_the_default_resolver() {
        let ours = || Box::new(Resolver) as Box<dyn CryptoResolver + Send>;
        let (a, b) = pair(ours);
        assert_eq!(a, b);
        let params: snow::params::NoiseParams = crate::handshake::NOISE.parse().unwrap();
        let psk = [7u8; 32];
        for ring_initiates in [true, false] {
            let mk = |ring: bool| -> Box<dyn CryptoResolver + Send> {
                if ring {
                    Box::new(Resolver)
                } else {
                    Box::new(DefaultResolver)
                }
            };
            let mut i = snow::Builder::with_resolver(params.clone(), mk(ring_initiates))
                .psk(0, &psk)
                .build_initiator()
                .unwrap();
            let mut r = snow::Builder::with_resolver(params.clone(), mk(!ring_initiates))
                .psk(0, &psk)
                .build_responder()
                .unwrap();
            let (mut m, mut p) = ([0u8; 256], [0u8; 256]);
            let n = i.write_message(b"hi", &mut m).unwrap();
            r.read_message(&m[..n], &mut p).unwrap();
            let n = r.write_message(b"ho", &mut m).unwrap();
            let k = i.read_message(&m[..n], &mut p).unwrap();
            assert_eq!(&p[..k], b"ho");
            assert_eq!(i.get_handshake_hash(), r.get_handshake_hash());
        }
    }

    /// Key pairs from the pool are all different, and the pool refills.
    #[test]
    fn the_pool_hands_out_each_key_once() {
        let mut rng = DefaultResolver.resolve_rng().unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 * POOL_SIZE {
            let mut a = Ephemeral25519::default();
            a.generate(&mut *rng);
            assert!(seen.insert(a.public), "a public key handed out twice");
        }
        let p = pool().expect("the pool thread");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while p.keys.lock().len() < POOL_SIZE {
            assert!(std::time::Instant::now() < deadline, "the pool refills");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    /// A key is used once: a second Diffie-Hellman with it fails, and so
    /// does one with a static key that was `set`.
    #[test]
    fn an_ephemeral_key_serves_one_exchange() {
        let mut a = Ephemeral25519::default();
        let mut b = Ephemeral25519::default();
        let mut rng = DefaultResolver.resolve_rng().unwrap();
        a.generate(&mut *rng);
        b.generate(&mut *rng);
        assert_ne!(a.pubkey(), [0u8; 32]);
        let (mut s1, mut s2) = ([0u8; 32], [0u8; 32]);
        a.dh(b.pubkey(), &mut s1).unwrap();
        b.dh(a.pubkey(), &mut s2).unwrap();
        assert_eq!(s1, s2);
        assert!(a.dh(b.pubkey(), &mut s1).is_err(), "used twice");
        let mut c = Ephemeral25519::default();
        c.set(&[1u8; 32]);
        assert!(c.dh(b.pubkey(), &mut s1).is_err());
        // A low-order peer key (all zeros) is refused.
        let mut d = Ephemeral25519::default();
        d.generate(&mut *rng);
        assert!(d.dh(&[0u8; 32], &mut s1).is_err());
        assert!(a.privkey().is_empty());
    }

    /// This thread's CPU time (steadier than wall time on a loaded
    /// machine).
    pub(crate) fn cpu() -> std::time::Duration {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec through a valid pointer.
        #[allow(unsafe_code)]
        unsafe {
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t)
        };
        std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }

    /// CPU cost of one NNpsk0 handshake, both sides, with each resolver
    /// (run in release, by hand).
    #[test]
    #[ignore]
    fn handshake_cost() {
        for round in 0..3 {
            for ring in [false, true] {
                let n = 1000;
                let t = cpu();
                for _ in 0..n {
                    if ring {
                        pair(|| Box::new(Resolver));
                    } else {
                        pair(|| Box::new(DefaultResolver));
                    }
                }
                eprintln!(
                    "round {round} {}: {:.1} us CPU per NNpsk0 handshake (both sides)",
                    if ring { "ring" } else { "dalek" },
                    (cpu() - t).as_secs_f64() * 1e6 / n as f64
                );
            }
        }
    }
}
