"""Shipped stop-word lists (English, Chinese, Japanese, Korean) for natural-language queries.

A question typed as a sentence ("When did Caroline go to the support group?") carries words that
occur in nearly every message; ANDed, they make the query find nothing, ORed they only add noise.
These lists drop them before the query reaches an index. They are deliberately short and
conservative: a word a user might really search for ("deploy", "error", "服务器") is never here.

- ``ENGLISH``: function words and question words, lower case (compared after lowercasing).
- ``CHINESE``: pronouns, particles, question words; matched as whole chunks and, greedily and
  longest first, as pieces of a CJK run (Chinese has no spaces).
- ``JAPANESE``: particles, auxiliaries and question words in kana and kanji.
- ``KOREAN``: whole words, and ``KOREAN_PARTICLES``: suffixes stripped from a Hangul word
  (``검색을`` → ``검색``) so the stem matches any inflected form as a substring.
"""

from __future__ import annotations


def _listed(text: str) -> frozenset[str]:
    return frozenset(text.split())


ENGLISH = _listed("""
a about above after again against all am an and any are aren't as at be because been before being
below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't
down during each else ever few for from further get gets got had hadn't has hasn't have haven't
having he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm
i've if in into is isn't it it's its itself just let's like me more most much must mustn't my
myself no nor not now of off on once only or other ought our ours ourselves out over own please
same shall shan't she she'd she'll she's should shouldn't so some such tell than that that's the
their theirs them themselves then there there's these they they'd they'll they're they've this
those through to too under until up upon us very was wasn't we we'd we'll we're we've were
weren't what what's when when's where where's whether which while who who's whom whose why why's
will with won't would wouldn't yes yet you you'd you'll you're you've your yours yourself
yourselves also anything something someone anyone everything thing things one ones would've
may might many kind sort really actually s t d ll m re ve
""")

CHINESE = _listed("""
的 了 是 在 和 也 都 就 还 吗 呢 吧 啊 呀 嘛 哦 我 你 他 她 它 把 被 给 这个 那个 这些 那些 这里 那里 哪里
哪个 哪些 什么 怎么 怎样 怎么样 如何 为什么 为何 多少 谁 何时 时候 什么时候 我们 你们 他们 她们 它们 咱们
自己 您 没有 一个 一些 一下 请 请问 告诉 知道 曾经 以前 之前 当时 那时 因为 所以 但是 可是 如果 虽然 然后
还是 或者 哪儿 是否 是不是 有没有 可以 能够 应该 啥 咋 这 那 哪 过 着 吗 么 之 与 及 或
""")

JAPANESE = _listed("""
は が を に で と も の へ や か ね よ な から まで より だ です ます でした ました ません ない
だった する した して します された され ある あった いる いた いつ どこ だれ 誰 なに 何 なぜ どう
どの どれ どんな いくつ いくら これ それ あれ この その あの ここ そこ あそこ 私 わたし 僕 あなた
彼 彼女 について ため こと もの ください 教えて ですか ましたか でしたか のは には では とは
""")

KOREAN = _listed("""
그 이 저 것 수 등 및 그리고 그러나 하지만 또는 또 더 잘 왜 어떻게 언제 어디 어디서 누가 누구 무엇 뭐 무슨
어느 얼마 몇 나 너 저는 나는 우리 그들 그녀 제 내 당신 있다 없다 했다 하다 했나요 있나요 인가요 입니까
""")

KOREAN_PARTICLES = tuple(sorted(_listed("""
은 는 이 가 을 를 에 에서 에게 께 의 로 으로 와 과 도 만 까지 부터 하고 이나 나 랑 이랑 보다 처럼 한테
에서는 에는 으로는 로는 이에요 예요 입니다 인가요 했나요 했어요 해요 했습니다 이다
"""), key=len, reverse=True))


def is_stop_word(word: str) -> bool:
    """True for a word of any shipped list (English compared in lower case)."""
    return word.lower() in ENGLISH or word in CHINESE or word in JAPANESE or word in KOREAN


def strip_korean_particle(word: str) -> str:
    """``word`` without one trailing particle, when a stem of 1+ letters remains."""
    for particle in KOREAN_PARTICLES:
        if len(word) > len(particle) and word.endswith(particle):
            return word[:-len(particle)]
    return word


_CJK_STOPS = sorted((w for w in CHINESE | JAPANESE if len(w) >= 1), key=len, reverse=True)


def split_cjk_stops(run: str) -> list[str]:
    """Cut a spaceless CJK run at stop words (longest first), returning the content pieces.

    Only particles and pronouns that rarely sit inside a content word cut a run (the list
    leaves out 中, 上, 有, 不 …: 中文, 上海, 所有, 不同); the pieces keep their order.
    """
    pieces: list[str] = []
    current: list[str] = []
    pos = 0
    while pos < len(run):
        stop = next((w for w in _CJK_STOPS if run.startswith(w, pos)), None)
        if stop is None:
            current.append(run[pos])
            pos += 1
            continue
        if current:
            pieces.append("".join(current))
            current = []
        pos += len(stop)
    if current:
        pieces.append("".join(current))
    return pieces
