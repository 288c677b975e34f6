"""Tools on top of the client library: fabricctl, the demo, the fault CLI, pytest fixtures."""
