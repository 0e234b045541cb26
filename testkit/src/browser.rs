//! Debian's Chromium, headless, for tests that look at a page as a person's browser shows it
//! (`scripts/chromium` installs it and names it in `KUBE_FSM_CHROMIUM`): the DOM after the page
//! loaded, and a screenshot decoded to pixels. Every run starts a fresh profile and keeps
//! Chromium off the network. Skipped loudly without one, required with
//! `KUBE_FSM_REQUIRE_CLUSTER=1`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::cluster::{fresh_name, tool};

/// How long one page may take.
const TIMEOUT: Duration = Duration::from_mins(1);

/// A Chromium binary.
#[derive(Debug)]
pub struct Chromium {
    binary: PathBuf,
}

/// A screenshot's pixels, RGBA, row by row.
#[derive(Debug)]
pub struct Pixels {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    rgba: Vec<u8>,
}

impl Pixels {
    /// How many pixels' `[red, green, blue]` satisfy `which`.
    pub fn count(&self, which: impl Fn([u8; 3]) -> bool) -> usize {
        self.rgba
            .chunks_exact(4)
            .filter(|p| which([p[0], p[1], p[2]]))
            .count()
    }
}

impl Chromium {
    /// The one `KUBE_FSM_CHROMIUM` names. `None`, after a loud message, when there is none and
    /// the run does not require it.
    ///
    /// # Panics
    /// When one is required and missing.
    #[must_use]
    pub fn find(test: &str) -> Option<Chromium> {
        let binary = tool(
            test,
            "KUBE_FSM_CHROMIUM",
            "scripts/chromium ensure; eval \"$(scripts/chromium env)\"",
        )?;
        Some(Chromium {
            binary: binary.into(),
        })
    }

    /// The page's DOM once loaded, serialized.
    ///
    /// # Panics
    /// When Chromium fails or takes longer than a minute.
    pub async fn dom(&self, url: &str) -> String {
        let out = self.run(&["--dump-dom", url]).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A `width`×`height` screenshot of the page, written to `path` (PNG) and decoded.
    ///
    /// # Panics
    /// When Chromium fails, or the file is not a PNG.
    pub async fn screenshot(&self, url: &str, path: &Path, (width, height): (u32, u32)) -> Pixels {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("the screenshot's folder");
        }
        let shot = format!("--screenshot={}", path.display());
        let size = format!("--window-size={width},{height}");
        self.run(&["--hide-scrollbars", &shot, &size, url]).await;
        let file = std::fs::File::open(path).expect("the screenshot");
        let mut reader = png::Decoder::new(std::io::BufReader::new(file))
            .read_info()
            .expect("a PNG");
        let mut buffer = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buffer).expect("the PNG's pixels");
        buffer.truncate(info.buffer_size());
        let rgba = match info.color_type {
            png::ColorType::Rgba => buffer,
            png::ColorType::Rgb => buffer
                .chunks_exact(3)
                .flat_map(|p| [p[0], p[1], p[2], 255])
                .collect(),
            other => panic!("a screenshot in {other:?}"),
        };
        Pixels {
            width: info.width,
            height: info.height,
            rgba,
        }
    }

    /// Runs Chromium headless on `args` with a fresh profile; its standard output.
    async fn run(&self, args: &[&str]) -> Vec<u8> {
        let profile = std::env::temp_dir().join(fresh_name("kube-fsm-chromium"));
        let child = Command::new(&self.binary)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-dev-shm-usage",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start Chromium");
        let out = tokio::time::timeout(TIMEOUT, child.wait_with_output())
            .await
            .expect("Chromium finished within a minute")
            .expect("Chromium's output");
        let _ = std::fs::remove_dir_all(&profile);
        assert!(
            out.status.success(),
            "Chromium {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }
}
