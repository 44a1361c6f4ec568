//! Telling a service manager that a process is ready: systemd's `Type=notify` protocol
//! (sd_notify(3)), one datagram such as `READY=1` to the Unix socket `NOTIFY_SOCKET`
//! names. Each process's config reads that variable; this only sends. A name starting
//! with `@` is an abstract socket.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (`READY=1`, `STOPPING=1`, …) to the socket `socket` names.
pub fn notify(socket: &str, state: &str) -> std::io::Result<()> {
    let sender = UnixDatagram::unbound()?;
    let addr = match socket.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes())?
        }
        None => SocketAddr::from_pathname(socket)?,
    };
    sender.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_socket_receives_the_state() {
        let dir = std::env::temp_dir().join(format!("sd-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("notify");
        let _ = std::fs::remove_file(&path);
        let receiver = UnixDatagram::bind(&path).expect("bind");
        notify(&path.display().to_string(), "READY=1").expect("sent");
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).expect("received");
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_abstract_socket_receives_the_state() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("studio-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
        let receiver = UnixDatagram::bind_addr(&addr).expect("bind");
        notify(&format!("@{name}"), "READY=1").expect("sent");
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).expect("received");
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn no_listener_is_an_error_not_a_panic() {
        assert!(notify("/nonexistent/notify", "READY=1").is_err());
    }
}
