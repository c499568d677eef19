"""Results on the host side, by stage, one direction: ``store`` (where result documents live and how
they are found) → ``verdict`` (statistics and decisions over them) → ``render`` (words, tables,
pictures). A renderer computes no statistics; a verdict reads no file. docs/architecture.md follows
a document from the agent's JSON through the three stages to the answer on the page."""
