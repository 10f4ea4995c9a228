"""Saving a folder as one whole (:func:`staged`): every member is written into a new private
folder beside the target, which then takes the target's place by renames, so that nothing is
written through a link found in the target, no member of an earlier save stays behind, and a
reader finds one save or the other. Where the folder cannot be renamed (a mount point, a parent
that is not writable), the save goes into it member by member instead.
"""

import errno
import os
import shutil
import stat
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

_MEMBER_FILES = ("metadata.json", "indices.npz")


def _is_saved_member(entry):
    """Whether a folder entry is one a save writes (a regular file or, for ``sources``, a
    folder of regular Parquet files), never a link. An entry gone meanwhile (a concurrent save
    moved the folder away) is no objection."""
    name = entry.name
    try:
        mode = entry.lstat().st_mode
        if name == "sources":
            return stat.S_ISDIR(mode) and all(
                stat.S_ISREG(child.lstat().st_mode) and child.suffix == ".parquet"
                for child in entry.iterdir()
            )
    except FileNotFoundError:
        return True
    source = (
        name.startswith("source_")
        and name.endswith((".npy", ".npz"))
        and name[len("source_") : -4].isdigit()
    )
    return stat.S_ISREG(mode) and (name in _MEMBER_FILES or source)


def _check_replaceable(folder):
    """Refuse to replace a folder that holds anything a save does not write."""
    try:  # one lstat: a folder that a concurrent save moves away meanwhile is no objection
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):  # a link (to a folder too) or a file
        raise ValueError(f"{folder} exists and is not a folder; save into a folder")
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:  # moved away by a concurrent save
        return
    foreign = sorted(entry.name for entry in entries if not _is_saved_member(entry))
    if foreign:
        links = [name for name in foreign if (folder / name).is_symlink()]
        why = (
            f"{links} {'is a link' if len(links) == 1 else 'are links'}, which a save never "
            "writes through"
            if links
            else f"it holds {foreign}, which a save does not write"
        )
        raise ValueError(
            f"cannot save into {folder}: {why}; save into a new or empty folder, or "
            "one an earlier save wrote"
        )


def _default_mode(stage):
    """The mode ``mkdir`` gives a folder under the current umask (read without changing the
    process-wide umask, which other threads may be using)."""
    probe = stage / ".mode"
    probe.mkdir()
    mode = stat.S_IMODE(probe.stat().st_mode)
    probe.rmdir()
    return mode


@contextmanager
def staged(folder):
    """A new private folder to write a save into; on success it replaces ``folder``.

    The stage is created beside ``folder`` (same file system) with mode 0700, so nothing else
    can put a file or link in it; its members are written there, then the stage is renamed to
    ``folder`` -- after an earlier save in ``folder`` is renamed away (and removed). A reader
    meanwhile finds the old save, the new one, or for an instant no folder (a clear
    FileNotFoundError), never a mix. Concurrent saves into one folder end with one of them.

    Parameters
    ----------
    folder : str or Path
        The folder to (re)place.

    Yields
    ------
    Path
        The staging folder to write the members into.

    Raises
    ------
    ValueError
        If ``folder`` exists and holds anything but an earlier save (or is not a folder).
    """
    folder = Path(os.path.abspath(folder))
    if folder.is_symlink():  # the caller's own link to a folder: save where it leads
        folder = folder.resolve()
    parent = folder.parent
    parent.mkdir(parents=True, exist_ok=True)
    exists = os.path.lexists(folder)
    if exists:
        _check_replaceable(folder)
    # A folder that cannot be renamed (a mount point, or in a folder this user may not write)
    # is saved into in place: the stage inside it, each member then renamed over its old one
    # (a rename replaces a link, never writes through it) and the earlier save's others removed.
    beside = not exists or (not os.path.ismount(folder) and os.access(parent, os.W_OK))
    stage = Path(
        tempfile.mkdtemp(prefix=f".{folder.name}.saving-", dir=parent if beside else folder)
    )
    try:
        yield stage
        if beside:
            try:  # the earlier save's mode; gone meanwhile (a concurrent save), the default
                mode = stat.S_IMODE(os.stat(folder).st_mode)
            except FileNotFoundError:
                mode = _default_mode(stage)
            os.chmod(stage, mode)
            _swap_in(stage, folder)
        else:
            _replace_in_place(stage, folder)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _replace_in_place(stage, folder):
    """Move a stage's members into ``folder`` (the header last) and remove the earlier save's
    members it does not replace. Unlike a swap, a reader may meet a mix meanwhile: only for a
    folder that cannot be renamed."""
    names = sorted((entry.name for entry in stage.iterdir()), key=lambda n: n == "metadata.json")
    for name in names:
        target = folder / name
        if name == "sources" and os.path.lexists(target):  # a folder: moved away, then removed
            os.rename(target, stage / ".replaced-sources")
        os.replace(stage / name, target)
    for entry in folder.iterdir():
        if entry.name not in names and entry != stage and _is_saved_member(entry):
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    shutil.rmtree(stage)


def _swap_in(stage, folder, attempts=100):
    """Rename ``stage`` to ``folder``, an earlier save there renamed away first and removed."""
    for _ in range(attempts):
        old = None
        if os.path.lexists(folder):
            _check_replaceable(folder)
            old = folder.parent / f".{folder.name}.replaced-{uuid.uuid4().hex}"
            try:
                os.rename(folder, old)
            except FileNotFoundError:  # another save moved it away first
                old = None
        try:
            os.rename(stage, folder)
            placed = True
        except OSError as error:
            # another save put its folder in place between the two renames: try again
            if error.errno not in (
                errno.EEXIST,
                errno.ENOTEMPTY,
                errno.EISDIR,
                errno.EACCES,
                errno.EPERM,
            ):
                raise
            placed = False
        if old is not None:
            if placed or os.path.lexists(folder):  # superseded, by this save or another
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(old, folder)  # nothing put in place: the earlier save goes back
        if placed:
            return
    raise OSError(f"could not put the save in place at {folder}: other saves kept replacing it")
