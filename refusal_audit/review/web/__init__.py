"""The review web app (server-rendered pages, issue 10)."""
