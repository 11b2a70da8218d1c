"""The command line: `tandem generate|models|bench|rpc-server` over one parser base, one error edge
and one exit-code policy (cli_base)."""
