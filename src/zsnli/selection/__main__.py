"""``python -m zsnli.selection``: choose the served scoring and write calibration.json (`zsnli.selection.cli.main`)."""

from zsnli.selection.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
