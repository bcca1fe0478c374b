"""The shipped refusal pre-filter artifact (package data; rebuilt by ``refusal-audit train``)."""
