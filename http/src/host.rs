//! The `Host` check against DNS rebinding.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Whether a `Host` header names the server the way only a client that means it does: an IP
/// address (`127.0.0.1`, `[::1]`) or `localhost`, with or without a port. A name that resolves
/// here (DNS rebinding) is not accepted.
pub(crate) fn host_accepted(value: &[u8]) -> bool {
    let Ok(value) = std::str::from_utf8(value) else {
        return false;
    };
    let port_ok = |port: &str| port.is_empty() || port.parse::<u16>().is_ok();
    if let Some(rest) = value.strip_prefix('[') {
        return rest.split_once(']').is_some_and(|(address, port)| {
            address.parse::<Ipv6Addr>().is_ok()
                && (port.is_empty() || port.strip_prefix(':').is_some_and(port_ok))
        });
    }
    let (host, port) = value.split_once(':').unwrap_or((value, ""));
    port_ok(port) && (host.eq_ignore_ascii_case("localhost") || host.parse::<Ipv4Addr>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::host_accepted;

    #[test]
    fn hosts() {
        for good in [
            "127.0.0.1:6060",
            "127.0.0.1",
            "localhost:6060",
            "LOCALHOST",
            "[::1]:6060",
            "[::1]",
            "10.1.2.3:80",
        ] {
            assert!(host_accepted(good.as_bytes()), "{good}");
        }
        for bad in [
            "evil.example:6060",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io:6060",
            "[::1]x",
            "[evil]:1",
            "127.0.0.1:port",
            "",
        ] {
            assert!(!host_accepted(bad.as_bytes()), "{bad}");
        }
    }
}
