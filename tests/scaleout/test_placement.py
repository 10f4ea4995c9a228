"""Where the data of an iterative fit lives: a fit's labels beside the persisted partitions that
use them (a loss + gradient pass then moves only d-sized partials), and partition sizes the
scheduler can weigh (``dask.sizeof``)."""

import numpy as np
from dask.sizeof import sizeof
from distributed import futures_of, wait

from ilargi.datasets import make_star
from ilargi.scaleout import sizes
from ilargi.scaleout.matrix import _Once
from tests.scaleout.conftest import assert_close, scenario


def test_partitions_have_their_size():
    X, _ = scenario("dense")
    piece_bytes = sum(part.source.nbytes for part in X.parts)
    assert sizeof(X) == sizes.matrix_bytes(X) >= piece_bytes


def test_labels_placed_beside_partitions(client):
    X, y = make_star(4000, tuple_ratio=20, n_dims=2, d_fact=3, random_state=0)
    D = X.to_dask(chunks=500)
    labels = (D.align(y) > 0).astype(float)
    owner = _Once()
    placed = D._placed(owner, labels)
    assert D._placed(owner, labels) is placed  # once per owner
    built = D._built[0]
    wait(futures_of(placed.blocks))
    partitions, blocks = client.who_has(built), client.who_has(placed.blocks)
    for part, block in zip(built, placed.blocks):
        assert set(blocks[block.key]) <= set(partitions[part.key])
    values = np.concatenate(client.gather([futures_of(b)[0] for b in placed.blocks]))
    assert np.array_equal(values, (y > 0).astype(float))


def test_loss_passes_move_only_partials(client):
    """After the first pass of a fit (which places the labels), no block of n rows moves."""
    from ilargi.models import LogisticRegression

    X, y = make_star(6000, tuple_ratio=20, n_dims=2, d_fact=3, random_state=0)
    D = X.to_dask(chunks=500)
    labels = D.align((y > np.median(y)).astype(float))
    wait(futures_of(D.persist()) + futures_of(labels))
    moved, original = [], D.loss_gradient

    def loss_gradient(*args, **kwargs):
        client.run(_clear)
        out = original(*args, **kwargs)
        moved.append(max(sum(client.run(_largest).values(), []), default=0))
        return out

    D.loss_gradient = loss_gradient
    LogisticRegression(solver="gd", max_iter=6, tol=0.0).fit(D, labels)
    d = X.shape[1]
    # a label block is 500 × 8 = 4,000 bytes; a partial (loss, gradient, total) about 8·d + 112
    assert max(moved[1:]) <= 8 * d + 1000, moved


def _clear(dask_worker):
    dask_worker.transfer_outgoing_log.clear()


def _largest(dask_worker):
    return [max(entry["keys"].values(), default=0) for entry in dask_worker.transfer_outgoing_log]


def test_partition_built_for_one_task_leaves_no_cycles():
    """A partition not persisted is built inside the task that uses it and forgets its caches:
    its arrays go with the task instead of waiting in reference cycles for a full collection
    (a worker's memory then holds one partition, not every one since the last collection)."""
    import gc
    import weakref

    from ilargi.scaleout import pieces, tasks

    X, y = make_star(3000, tuple_ratio=20, n_dims=2, d_fact=3, random_state=0)
    X = (X - 1.0) * 0.5  # an affine view, as StandardScaler gives
    layout, dims, (piece,) = pieces.split(X, [0, X.shape[0]])
    labels = (y > 0).astype(float)
    coef = np.full(X.shape[1], 0.01)
    for func, args in [
        (tasks.loss_gradient, (coef, 0.0, "logistic", 2, labels, None)),
        (tasks.tmm, (labels,)),
        (tasks.crossprod, (None,)),
        (tasks.gramvec, (coef, 1.0, labels)),
        (tasks.exact_colsums, ()),
        (tasks.centred_squares, (np.full(X.shape[1], 0.25),)),
    ]:
        expected = func(pieces.build(piece, dims, layout), *args)
        seen = []

        def run(nm, *args):
            seen.extend(weakref.ref(part) for part in nm.parts)
            return func(nm, *args)

        gc.disable()  # what is freed now is freed by reference counting, not by a collection
        try:
            result = tasks.on_piece(run, piece, dims, layout, [], *args)
            assert seen and all(ref() is None for ref in seen), func.__name__
        finally:
            gc.enable()
        for a, b in zip(
            result if isinstance(result, tuple) else [result],
            expected if isinstance(expected, tuple) else [expected],
        ):
            assert_close(a, b, what=func.__name__)


def test_partitions_copy_the_rows_they_use_of_a_big_dimension(client):
    """A partition that uses few rows of a broadcast table keeps its own copy of them (its passes
    then cost its rows, not the table's); every operator still equals the in-memory one, and
    .compute() and row selections map the copies back."""
    from ilargi.scaleout import pieces

    X, y = make_star(2000, tuple_ratio=1, n_dims=2, d_fact=3, random_state=0)
    layout, dims, cut = pieces.split(X, [0, 150, 300, 2000])
    assert set(cut[0].subset) == set(cut[1].subset) == {1, 2}  # 150 rows use < half of 2000
    assert not cut[2].subset  # 1700 rows use most of them
    assert cut[0].local[1][0].shape[0] == np.unique(X.parts[1].indicator.rows[:150]).size
    D = X.to_dask(chunks=150)
    w = np.linspace(-1, 1, X.shape[1])
    assert_close((D @ w).compute(), X @ w, what="T·w")
    assert_close(D.T @ y, X.T @ y, what="Tᵀ·y")
    assert_close(D.crossprod(), X.crossprod(), what="TᵀT")
    assert_close(D.var(axis=0), X.var(axis=0), what="var")
    assert_close(D.compute().toarray(), X.toarray(), what="compute()")
    rows = np.array([1999, 3, 151, 3, 700])
    assert_close(D[rows].compute().toarray(), X.toarray()[rows], what="rows")
