//! A kernel command line (`/proc/cmdline`) split into parameters the way the
//! Linux kernel splits it, so that `check` sees what the kernel set rather
//! than what a split on spaces suggests.
//!
//! The kernel's rules, from `next_arg` (lib/cmdline.c) and `parse_args`
//! (kernel/params.c), read at torvalds/linux commit 0ea09083116d, and
//! Documentation/admin-guide/kernel-parameters.rst
//! (<https://github.com/torvalds/linux/blob/v6.11/Documentation/admin-guide/kernel-parameters.rst>):
//! - Parameters are separated by white space outside double quotes; a `"`
//!   anywhere in a parameter opens or closes a quoted stretch, and there is no
//!   escape: `dyndbg="module vfio intel_iommu=on"` is one parameter, `dyndbg`,
//!   and sets no `intel_iommu`.
//! - A quote left open takes the rest of the line into the parameter.
//! - The name ends at the first `=` (one at the very start of a parameter
//!   does not count); a value starting with `"` loses that quote, and the
//!   parameter's closing `"` is dropped.
//! - A parameter wholly in quotes (`"iommu=pt"`) loses its outer quotes.
//! - A bare `--` ends the kernel's parameters: what follows goes to init.
//! - Hyphens and underscores are equivalent in names (`intel-iommu=on`).

/// One parameter the kernel reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelParam {
    /// The name as written (quotes removed as the kernel removes them).
    pub name: String,
    /// The value after the first `=`, without its quotes; None without `=`.
    pub value: Option<String>,
}

impl KernelParam {
    /// Whether the name is `name`, hyphens and underscores alike.
    pub fn is(&self, name: &str) -> bool {
        let norm = |s: &str| s.replace('-', "_");
        norm(&self.name) == norm(name)
    }
}

impl std::fmt::Display for KernelParam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            None => write!(f, "{}", self.name),
            Some(v) if v.contains(char::is_whitespace) => write!(f, "{}=\"{v}\"", self.name),
            Some(v) => write!(f, "{}={v}", self.name),
        }
    }
}

/// The kernel's `isspace` on the ASCII range: space, tab, newline, vertical
/// tab, form feed, carriage return.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn skip_spaces(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| is_space(**b)).count();
    &s[n..]
}

/// One step of the kernel's `next_arg`: the parameter at the start of `args`
/// (which starts with no white space) and the rest after it.
fn next_arg(args: &[u8]) -> (KernelParam, &[u8]) {
    let (args, quoted) = match args.strip_prefix(b"\"") {
        Some(rest) => (rest, true),
        None => (args, false),
    };
    let mut in_quote = quoted;
    // As in the kernel, 0 means "no '='" (so one at index 0 is not a separator).
    let mut equals = 0;
    let mut i = 0;
    while i < args.len() {
        let c = args[i];
        if is_space(c) && !in_quote {
            break;
        }
        if equals == 0 && c == b'=' {
            equals = i;
        }
        if c == b'"' {
            in_quote = !in_quote;
        }
        i += 1;
    }
    // Where the kernel writes its NULs: the end of the name and of the value.
    let closing_quote = i > 0 && args[i - 1] == b'"';
    let text = |r: std::ops::Range<usize>| String::from_utf8_lossy(&args[r]).into_owned();
    let param = if equals == 0 {
        let end = if quoted && closing_quote { i - 1 } else { i };
        KernelParam {
            name: text(0..end),
            value: None,
        }
    } else {
        let mut start = equals + 1;
        let mut end = i;
        if args.get(start) == Some(&b'"') {
            start += 1;
            if closing_quote {
                end = i - 1;
            }
        }
        if quoted && closing_quote {
            end = end.min(i - 1);
        }
        KernelParam {
            name: text(0..equals),
            value: Some(text(start..end.max(start))),
        }
    };
    let rest = if i < args.len() {
        &args[i + 1..]
    } else {
        &[][..]
    };
    (param, skip_spaces(rest))
}

/// The kernel's parameters of `cmdline`, in order, up to a bare `--`.
///
/// ```
/// use p2p_topology::kernel_cmdline::params;
/// let p = params("ro dyndbg=\"module vfio intel_iommu=on\" iommu=pt -- intel_iommu=on");
/// let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
/// assert_eq!(names, ["ro", "dyndbg", "iommu"]);
/// assert_eq!(p[1].value.as_deref(), Some("module vfio intel_iommu=on"));
/// ```
pub fn params(cmdline: &str) -> Vec<KernelParam> {
    let mut out = Vec::new();
    let mut args = skip_spaces(cmdline.as_bytes());
    while !args.is_empty() {
        let (p, rest) = next_arg(args);
        args = rest;
        if p.value.is_none() && p.name == "--" {
            break;
        }
        out.push(p);
    }
    out
}

/// The value the kernel's parameter `name` takes: the last one given (each
/// setting overwrites the one before), None when not set.
pub fn value_of<'p>(params: &'p [KernelParam], name: &str) -> Option<&'p str> {
    params
        .iter()
        .rev()
        .find(|p| p.is(name))
        .and_then(|p| p.value.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(cmdline: &str) -> Vec<(String, Option<String>)> {
        params(cmdline)
            .into_iter()
            .map(|p| (p.name, p.value))
            .collect()
    }

    fn p(name: &str, value: Option<&str>) -> (String, Option<String>) {
        (name.to_string(), value.map(str::to_string))
    }

    /// next_arg: white space inside double quotes does not separate, and the
    /// value loses its opening and closing quote.
    #[test]
    fn quotes_group_and_are_removed_from_the_value() {
        assert_eq!(
            pairs("dyndbg=\"module vfio intel_iommu=on iommu=pt\" quiet"),
            [
                p("dyndbg", Some("module vfio intel_iommu=on iommu=pt")),
                p("quiet", None)
            ]
        );
    }

    /// next_arg: an unterminated quote runs to the end of the line.
    #[test]
    fn an_unterminated_quote_takes_the_rest_of_the_line() {
        assert_eq!(
            pairs("ro foo=\"bar intel_iommu=on iommu=pt"),
            [p("ro", None), p("foo", Some("bar intel_iommu=on iommu=pt"))]
        );
        // A quote opened mid-parameter too.
        assert_eq!(pairs("a=b\"c d"), [p("a", Some("b\"c d"))]);
    }

    /// parse_args: a bare `--` stops the kernel's parameters; `--x` or `--=1` do not.
    #[test]
    fn double_dash_ends_the_kernels_part() {
        assert_eq!(pairs("ro -- iommu=pt intel_iommu=on"), [p("ro", None)]);
        assert_eq!(
            pairs("--x --=1 iommu=pt"),
            [p("--x", None), p("--", Some("1")), p("iommu", Some("pt"))]
        );
        // A quoted "--" is the kernel's `--` too (the quotes are removed first).
        assert_eq!(pairs("\"--\" iommu=pt"), Vec::new());
    }

    /// next_arg: a parameter wholly in quotes loses them; the name ends at the
    /// first '=', except one at the very start.
    #[test]
    fn whole_quotes_and_where_the_name_ends() {
        assert_eq!(pairs("\"iommu=pt\""), [p("iommu", Some("pt"))]);
        assert_eq!(pairs("a=b=c"), [p("a", Some("b=c"))]);
        assert_eq!(pairs("=x=y"), [p("=x", Some("y"))]);
        assert_eq!(pairs("a= b"), [p("a", Some("")), p("b", None)]);
        assert_eq!(pairs("a=\""), [p("a", Some(""))]);
        assert_eq!(pairs("  \t\n"), Vec::new());
    }

    /// kernel-parameters.rst: hyphens and underscores are equivalent in names;
    /// a later setting wins.
    #[test]
    fn names_match_hyphen_or_underscore_and_the_last_wins() {
        let ps = params("intel-iommu=off intel_iommu=on iommu=pt iommu=nopt");
        assert_eq!(value_of(&ps, "intel_iommu"), Some("on"));
        assert_eq!(value_of(&ps, "iommu"), Some("nopt"));
        assert_eq!(value_of(&ps, "amd_iommu"), None);
    }
}
