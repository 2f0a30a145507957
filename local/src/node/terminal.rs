//! A terminal for `exec -t` and for a container with `tty: true`: a pseudo-terminal pair
//! whose secondary side is the command's stdin, stdout, stderr and controlling terminal
//! (`setsid --ctty` makes it so, so ^C and job control reach the command), and whose
//! primary side the session (or the container's log) reads and writes.
//! Resizes arrive on kube's resize channel as `{"Width": W, "Height": H}`.

use std::os::fd::OwnedFd;

use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use serde::Deserialize;

/// The primary side of a pseudo-terminal.
#[derive(Debug)]
pub struct Terminal {
    primary: std::fs::File,
}

/// A resize message of kube's remote command protocol.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct Size {
    pub width: u16,
    pub height: u16,
}

impl Size {
    /// The size a resize message carries, if it is one.
    pub fn parse(payload: &[u8]) -> Option<Size> {
        serde_json::from_slice(payload).ok()
    }
}

impl Terminal {
    /// A new pseudo-terminal: its primary side, and its secondary side for the command.
    pub fn open() -> std::io::Result<(Terminal, OwnedFd)> {
        let primary = rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY)?;
        rustix::pty::grantpt(&primary)?;
        rustix::pty::unlockpt(&primary)?;
        let name = rustix::pty::ptsname(&primary, Vec::new())?;
        let secondary = rustix::fs::open(
            name.as_c_str(),
            OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok((
            Terminal {
                primary: std::fs::File::from(primary),
            },
            secondary,
        ))
    }

    /// Set the terminal's size (the command gets `SIGWINCH`).
    pub fn resize(&self, size: &Size) -> std::io::Result<()> {
        let ws = Winsize {
            ws_row: size.height,
            ws_col: size.width,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        Ok(rustix::termios::tcsetwinsize(&self.primary, ws)?)
    }

    /// The primary side, once more, for reading or writing it apart.
    pub fn side(&self) -> std::io::Result<tokio::fs::File> {
        Ok(tokio::fs::File::from_std(self.primary.try_clone()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_messages_are_kubes() {
        assert_eq!(
            Size::parse(br#"{"Width":120,"Height":40}"#),
            Some(Size {
                width: 120,
                height: 40
            })
        );
        assert_eq!(Size::parse(b"not json"), None);
        assert_eq!(Size::parse(br#"{"Width":-1,"Height":40}"#), None);
    }

    #[test]
    fn a_terminal_takes_a_size() {
        let (t, secondary) = Terminal::open().unwrap();
        t.resize(&Size {
            width: 100,
            height: 30,
        })
        .unwrap();
        let ws = rustix::termios::tcgetwinsize(&secondary).unwrap();
        assert_eq!((ws.ws_col, ws.ws_row), (100, 30));
    }
}
