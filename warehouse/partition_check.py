"""``python -m warehouse.partition_check DSN DATABASE [--fold]``: count the keys of
``refusal_events`` and ``assessments`` stored in more than one partition, and with ``--fold``
remove their extra versions (``warehouse.partition_keys``; the fix ``warehouse.migrate``
names when it refuses a migration that needs every key in one partition). A module of its
own, outside the package's imports, so that ``python -m`` runs it cleanly."""

from __future__ import annotations

import argparse

from warehouse.partition_keys import fold_spanning_keys, spanning_keys


def main(argv: list[str] | None = None) -> None:
    """``python -m warehouse.partition_check DSN DATABASE [--fold]``: print the keys spanning
    partitions per table, and with ``--fold`` remove their extra versions."""
    from warehouse.connect import connect

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("dsn", help="chdb:///path or http(s)://user@host:port")
    parser.add_argument("database")
    parser.add_argument("--fold", action="store_true", help="remove the extra versions")
    args = parser.parse_args(argv)
    client = connect(args.dsn, args.database)
    try:
        found = (fold_spanning_keys if args.fold else spanning_keys)(client, args.database)
    finally:
        client.close()
    for table, count in found.items():
        done = " (extra versions removed)" if args.fold and count else ""
        print(f"{table}: {count} key(s) in more than one partition{done}")


if __name__ == "__main__":
    main()
