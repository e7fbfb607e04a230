"""SSH adapter (asyncssh): host-key reads and pinned connections. Only this package imports asyncssh."""
