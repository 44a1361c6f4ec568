//! A paired browser's device label ("Firefox 133 on Windows"), read from the
//! `User-Agent` it paired with, so Devices tells one session from another.
//!
//! The header is the browser's to write, so only the label is kept: known browser and
//! system names from the tables below and a major version of at most four digits. No
//! text of the header itself reaches the store, a page or a log.

/// Browsers by the product token that names them, most specific first (Edge and Opera
/// also say `Chrome/`, Chrome also says `Safari/`).
const BROWSERS: &[(&str, &str)] = &[
    ("Edg/", "Edge"),
    ("EdgiOS/", "Edge"),
    ("EdgA/", "Edge"),
    ("OPR/", "Opera"),
    ("Vivaldi/", "Vivaldi"),
    ("SamsungBrowser/", "Samsung Internet"),
    ("Firefox/", "Firefox"),
    ("FxiOS/", "Firefox"),
    ("HeadlessChrome/", "Headless Chrome"),
    ("CriOS/", "Chrome"),
    ("Chromium/", "Chromium"),
    ("Chrome/", "Chrome"),
    ("Version/", "Safari"),
];

/// Systems by a token in the header's comment, most specific first (iOS says `Mac OS
/// X`, Android says `Linux`, ChromeOS says `X11`).
const SYSTEMS: &[(&str, &str)] = &[
    ("iPhone", "iPhone"),
    ("iPad", "iPad"),
    ("Android", "Android"),
    ("CrOS", "ChromeOS"),
    ("Windows", "Windows"),
    ("Macintosh", "macOS"),
    ("Linux", "Linux"),
];

/// The longest header read (and passed on by studio-app); anything past it is ignored.
pub const MAX_HEADER: usize = 1024;

/// The header's first [`MAX_HEADER`] bytes, cut at a character boundary.
pub fn clip(user_agent: &str) -> &str {
    let end = (0..=MAX_HEADER.min(user_agent.len()))
        .rev()
        .find(|&i| user_agent.is_char_boundary(i))
        .unwrap_or(0);
    &user_agent[..end]
}

/// "Chrome 131 on Linux", "Safari 18 on iPhone", "Firefox on Windows", or `None` when
/// the header names neither a known browser nor a known system.
pub fn label(user_agent: &str) -> Option<String> {
    let ua = clip(user_agent);
    let browser = BROWSERS.iter().find_map(|(token, name)| {
        let at = ua.find(token)?;
        // `Version/` is Safari's only beside `Safari/` (other browsers reuse the token).
        if *token == "Version/" && !ua.contains("Safari/") {
            return None;
        }
        Some((*name, major(&ua[at + token.len()..])))
    });
    let system = SYSTEMS
        .iter()
        .find(|(token, _)| ua.contains(token))
        .map(|(_, name)| *name);
    match (browser, system) {
        (Some((name, Some(v))), Some(os)) => Some(format!("{name} {v} on {os}")),
        (Some((name, None)), Some(os)) => Some(format!("{name} on {os}")),
        (Some((name, Some(v))), None) => Some(format!("{name} {v}")),
        (Some((name, None)), None) => Some(name.to_owned()),
        (None, Some(os)) => Some(format!("a browser on {os}")),
        (None, None) => None,
    }
}

/// The major version at the start of `rest` ("131" of "131.0.6778.85 Safari"): one to
/// four digits, else none.
fn major(rest: &str) -> Option<u16> {
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 4 {
        return None;
    }
    rest[..digits].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_headers_read_as_people_name_them() {
        let cases = [
            (
                "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
                 Chrome/131.0.0.0 Safari/537.36",
                "Chrome 131 on Linux",
            ),
            (
                "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
                 HeadlessChrome/131.0.6778.85 Safari/537.36",
                "Headless Chrome 131 on Linux",
            ),
            (
                "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 \
                 Firefox/133.0",
                "Firefox 133 on Windows",
            ),
            (
                "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 \
                 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
                "Safari 18 on macOS",
            ),
            (
                "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 \
                 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
                "Safari 18 on iPhone",
            ),
            (
                "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like \
                 Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.2903.70",
                "Edge 131 on Windows",
            ),
            (
                "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like \
                 Gecko) Chrome/131.0.6778.81 Mobile Safari/537.36",
                "Chrome 131 on Android",
            ),
            (
                "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like \
                 Gecko) Chrome/131.0.0.0 Safari/537.36",
                "Chrome 131 on ChromeOS",
            ),
            (
                "Mozilla/5.0 (Windows NT 10.0) Firefox/",
                "Firefox on Windows",
            ),
            (
                "Mozilla/5.0 (X11; Linux) something/1.0",
                "a browser on Linux",
            ),
        ];
        for (ua, want) in cases {
            assert_eq!(label(ua).as_deref(), Some(want), "{ua}");
        }
    }

    #[test]
    fn nothing_of_the_header_itself_is_kept() {
        for ua in [
            "",
            "curl/8.5.0",
            "<script>alert(1)</script>",
            "Chrome/1<b>31",
            "Chrome/99999999999999999999 (Windows)",
        ] {
            let got = label(ua);
            let allowed = |c: char| c.is_ascii_alphanumeric() || c == ' ';
            assert!(
                got.as_deref().is_none_or(|l| l.chars().all(allowed)),
                "{ua:?} gave {got:?}"
            );
        }
        assert_eq!(label("curl/8.5.0"), None);
        assert_eq!(label("Chrome/1<b>31"), Some("Chrome 1".into()));
        assert_eq!(
            label("Chrome/99999999999999999999 (Windows)"),
            Some("Chrome on Windows".into())
        );
        // A header longer than the part read, and one cut inside a character.
        let long = format!("{}Firefox/5", "é".repeat(MAX_HEADER));
        assert_eq!(label(&long), None);
        assert_eq!(clip(&long).len(), MAX_HEADER);
        assert_eq!(clip(&format!("x{long}")).len(), MAX_HEADER - 1);
    }
}
