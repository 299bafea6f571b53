"""Writes the Parquet fixtures in tests/data/parquet/ with pyarrow, as HF
datasets stores its files, and what pyarrow reads back from each
(`expected.json`: file -> rows), which lmkit's reader must match.

    assets/.venv-fixtures/bin/python scripts/make_parquet_fixtures.py

Cases: a `text` string column with an int `label`, a null text and several
row groups (Snappy, as `datasets` writes); `large_string` text with a
`title` column (Zstandard); dictionary-encoded repeated text (gzip); a
nested list column that lmkit leaves out.
"""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "parquet")


def texts(n, tag):
    return [
        f"{tag} document {i}: the quick brown fox jumps over the lazy dog.\n"
        f"Second line of {i}, with é and 😀." * (1 + i % 3)
        for i in range(n)
    ]


def main():
    os.makedirs(OUT, exist_ok=True)
    cases = {}

    t = texts(50, "snappy")
    t[7] = None
    table = pa.table({"text": pa.array(t, pa.string()), "label": pa.array([i % 3 for i in range(50)], pa.int64())})
    cases["snappy.parquet"] = (table, dict(compression="snappy", row_group_size=16))

    table = pa.table(
        {
            "title": pa.array([f"title {i}" for i in range(30)], pa.string()),
            "text": pa.array(texts(30, "zstd"), pa.large_string()),
            "score": pa.array([i / 4 for i in range(30)], pa.float64()),
        }
    )
    cases["zstd.parquet"] = (table, dict(compression="zstd", row_group_size=10))

    rep = [["alpha text", "beta text", "gamma text"][i % 3] for i in range(40)]
    table = pa.table(
        {
            "text": pa.array(rep, pa.string()),
            "tags": pa.array([[i, i + 1] for i in range(40)], pa.list_(pa.int32())),
            "ok": pa.array([i % 2 == 0 for i in range(40)], pa.bool_()),
        }
    )
    cases["gzip.parquet"] = (table, dict(compression="gzip", use_dictionary=True, row_group_size=25))

    expected = {}
    for name, (table, opts) in cases.items():
        path = os.path.join(OUT, name)
        pq.write_table(table, path, **opts)
        back = pq.read_table(path)
        # lmkit reads flat columns only: nested ones are left out.
        flat = [f.name for f in back.schema if not pa.types.is_nested(f.type)]
        expected[name] = {
            "row_groups": pq.ParquetFile(path).num_row_groups,
            "rows": back.select(flat).to_pylist(),
        }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
