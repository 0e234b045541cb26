//! The book's command-line reference (book/src/reference/cli.md) is `kube-fsm`'s own help:
//! each `### \`kube-fsm SUB\`` section's text block is what `kube-fsm SUB --help` prints.

use std::process::Command;

#[test]
fn the_book_shows_each_commands_help_as_it_is() {
    let reference = std::fs::read_to_string("../book/src/reference/cli.md").unwrap();
    let mut checked = 0;
    for section in reference.split("\n### `kube-fsm ").skip(1) {
        let (command, rest) = section
            .split_once('`')
            .expect("the heading's closing quote");
        let shown = rest
            .split_once("```text\n")
            .and_then(|(_, block)| block.split_once("```"))
            .map(|(block, _)| block)
            .expect("a text block under the heading");
        let help = Command::new(env!("CARGO_BIN_EXE_kube-fsm"))
            .args(command.split(' '))
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8(help.stdout).unwrap();
        assert_eq!(
            shown.trim_end(),
            help.trim_end(),
            "book/src/reference/cli.md: `kube-fsm {command}` is stale; paste its --help"
        );
        checked += 1;
    }
    assert_eq!(checked, 3, "new, check and lock");
}
