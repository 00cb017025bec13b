//! Socket options that `socket2` does not offer.

use std::io;
use std::os::fd::AsRawFd;

/// Caps the bytes a connection's kernel send queue holds that are not yet
/// sent (`TCP_NOTSENT_LOWAT`): past it, a write takes no more and the
/// socket is not writable, so what waits stays in graft's outbox (bounded
/// by the busy limit, where heartbeats and other senders' frames interleave)
/// instead of in a kernel queue that autotuning may grow to megabytes, in
/// which a round trip waits behind everything already written. Data in
/// flight (sent, not acknowledged) is not capped, so the throughput of a
/// long link is not either, as it would be with a small `SO_SNDBUF`.
/// `0` leaves the system's setting. Linux only; elsewhere nothing.
pub(crate) fn limit_unsent(sock: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    {
        let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
        #[allow(unsafe_code)]
        // SAFETY: `v` is a live `c_int` for the whole call and the length
        // passed is its size; the kernel copies it and keeps no pointer. A
        // descriptor that is not a TCP socket is an error return.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_NOTSENT_LOWAT,
                (&v as *const libc::c_int).cast::<libc::c_void>(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = sock;
    Ok(())
}
