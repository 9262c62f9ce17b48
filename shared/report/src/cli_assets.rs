//! What a package ships beside a binary, made from its clap definition: a man
//! page per command and subcommand, and bash, zsh and fish completions.
//!
//! Pure: each function returns file names and bytes; the binaries' hidden
//! `assets` command writes them, and `scripts/package.sh` puts them in the
//! .deb. One definition serves `--help`, the man pages and the completions,
//! so they cannot disagree.

use clap::Command;
use clap_complete::Shell;

/// One generated file: its name (relative to the output folder) and bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asset {
    /// Path below the output folder, e.g. `man/p2p-host-topo.1` or
    /// `completions/p2p-host.bash`.
    pub path: String,
    /// The file's contents.
    pub bytes: Vec<u8>,
}

/// Every file a package ships for `cmd`: its man pages, then its
/// completions.
pub fn all(cmd: Command) -> Vec<Asset> {
    let mut out = man_pages(cmd.clone());
    out.extend(completions(cmd));
    out
}

/// A man page (section 1) for `cmd` and one for every visible subcommand, at
/// any depth: `p2p-host.1`, `p2p-host-topo.1`,
/// `p2p-host-kubevirt-on-define-domain.1`.
pub fn man_pages(cmd: Command) -> Vec<Asset> {
    let mut cmd = cmd;
    cmd.build();
    let mut out = Vec::new();
    let name = cmd.get_name().to_string();
    collect_pages(&cmd, &name, &name, &mut out);
    out
}

/// `page` is the man page's name (`p2p-host-topo`), `bin` how it is typed
/// (`p2p-host topo`).
fn collect_pages(cmd: &Command, page: &str, bin: &str, out: &mut Vec<Asset>) {
    // The page's title and NAME section carry the full dashed name, so
    // `man p2p-host-topo` finds what `p2p-host topo --help` says.
    let titled = cmd.clone().name(page.to_string()).bin_name(bin.to_string());
    let mut bytes = Vec::new();
    clap_mangen::Man::new(titled)
        .render(&mut bytes)
        .expect("rendering into memory does not fail");
    out.push(Asset {
        path: format!("man/{page}.1"),
        bytes,
    });
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        let name = sub.get_name();
        collect_pages(
            sub,
            &format!("{page}-{name}"),
            &format!("{bin} {name}"),
            out,
        );
    }
}

/// Completion scripts for bash, zsh and fish, named where each shell's
/// package-provided completions live expects them: `completions/NAME.bash`
/// (installed as `bash-completion/completions/NAME`), `completions/_NAME`,
/// `completions/NAME.fish`.
pub fn completions(cmd: Command) -> Vec<Asset> {
    let mut cmd = cmd;
    let name = cmd.get_name().to_string();
    [Shell::Bash, Shell::Zsh, Shell::Fish]
        .into_iter()
        .map(|shell| {
            let mut bytes = Vec::new();
            clap_complete::generate(shell, &mut cmd, name.clone(), &mut bytes);
            let file = match shell {
                Shell::Zsh => format!("_{name}"),
                Shell::Fish => format!("{name}.fish"),
                _ => format!("{name}.bash"),
            };
            Asset {
                path: format!("completions/{file}"),
                bytes,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn sample() -> Command {
        Command::new("tool")
            .about("A tool.")
            .subcommand(Command::new("topo").about("Print the topology."))
            .subcommand(
                Command::new("kubevirt")
                    .subcommand(Command::new("on-define-domain").arg(Arg::new("vmi").long("vmi"))),
            )
            .subcommand(Command::new("secret").hide(true))
    }

    #[test]
    fn a_page_per_visible_command_at_every_depth() {
        let pages: Vec<String> = man_pages(sample()).into_iter().map(|a| a.path).collect();
        assert_eq!(
            pages,
            [
                "man/tool.1",
                "man/tool-topo.1",
                "man/tool-kubevirt.1",
                "man/tool-kubevirt-on-define-domain.1"
            ]
        );
    }

    #[test]
    fn a_subcommand_page_is_titled_with_its_dashed_name() {
        let page = man_pages(sample())
            .into_iter()
            .find(|a| a.path == "man/tool-topo.1")
            .unwrap();
        let text = String::from_utf8(page.bytes).unwrap();
        // roff: `.TH tool-topo 1 ...` and the NAME section `tool\-topo \- ...`.
        assert!(text.contains(".TH tool-topo 1"), "{text}");
        assert!(
            text.contains("tool\\-topo \\- Print the topology."),
            "{text}"
        );
        // SYNOPSIS: the command as typed.
        assert!(text.contains("\\fBtool topo\\fR"), "{text}");
    }

    #[test]
    fn completions_for_three_shells_under_their_conventional_names() {
        let files = completions(sample());
        let names: Vec<&str> = files.iter().map(|a| a.path.as_str()).collect();
        assert_eq!(
            names,
            [
                "completions/tool.bash",
                "completions/_tool",
                "completions/tool.fish"
            ]
        );
        let bash = String::from_utf8(files[0].bytes.clone()).unwrap();
        assert!(bash.contains("complete -F _tool"), "{bash}");
        let fish = String::from_utf8(files[2].bytes.clone()).unwrap();
        assert!(fish.contains("complete -c tool"), "{fish}");
    }
}
