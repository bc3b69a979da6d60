"""Natural-language query plans: quoted titles inside questions, CJK sentences with digits."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.search.query import parse_query
from refold.store import SearchQuery, Store


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def top(store: Store, text: str, **kw: Any) -> list[str]:
    return [h.content for h in store.search(SearchQuery(text, window=0, **kw))]


def test_a_quoted_title_inside_a_question_is_a_phrase_term_not_a_requirement(
        store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [
        user('We saw an art film called "Taxi Driver" tonight'),
        user("The movie is about a young driver who meets many passengers"),
        user("my taxi was late"),
    ])
    question = 'I shared a film called "Taxi Driver" with you, what is its content?'
    plan = parse_query(question).natural
    assert plan is not None and ("taxi", "driver") in [
        tuple(w.lower() for w in t.words) for t in plan.words]
    hits = top(store, question)
    assert hits[0] == 'We saw an art film called "Taxi Driver" tonight'
    assert len(hits) == 3  # ORed: "film", "driver" and "taxi" reach the others


def test_a_whole_question_in_quotes_is_read_as_the_question(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("I love listening to jazz music"), user("rain again")])
    assert top(store, '"What type of music do I like to listen to?"') == [
        "I love listening to jazz music"]


def test_quotes_without_a_sentence_stay_exact(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("server room key"), user("room for the server"),
                                 user("the server room is cold, key in the drawer")])
    assert parse_query('"server room"').natural is None
    assert parse_query('"server room" key').natural is None  # one plain word: still syntax
    assert parse_query('"server room" -key cold').natural is None  # operators: syntax
    assert sorted(top(store, '"server room"')) == [
        "server room key", "the server room is cold, key in the drawer"]
    assert top(store, '"where is the server room"') == []  # no sentence end: a phrase


def test_a_cjk_sentence_with_digits_is_natural_and_finds_the_date(store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("4月30号我学了一道新菜，回锅肉"), user("5月1号我去跑步了"),
                                 user("今天天气很好")])
    plan = parse_query("4月30号我做了一道什么菜？").natural
    assert plan is not None and "4月30号" in plan.cjk
    assert top(store, "4月30号我做了一道什么菜？")[0] == "4月30号我学了一道新菜，回锅肉"
    assert parse_query("本v2").natural is None  # a short mixed word stays one exact term
    assert top(store, "本v2") == []


def test_a_cjk_question_with_a_term_glued_in_is_a_sentence_not_one_exact_word(
        store: Store) -> None:
    # Chinese technical questions glue Latin terms in without spaces. Read as one mixed word
    # (as 本v2 is), the whole question was one exact substring and found nothing.
    s = store.create_session()
    store.append_messages(s.id, [
        user("我们需要给发票加一个导出 CSV 的功能：按月份导出，列包括发票号、客户和金额。"),
        user("用 pytest -q 跑测试，全部通过。"),
        user("今天天气很好")])
    for question in ("导出的CSV有哪些列", "导出的CSV有哪些列？"):
        assert parse_query(question).natural is not None
        assert top(store, question)[0].startswith("我们需要给发票加一个导出 CSV 的功能")
    assert top(store, "怎么用pytest跑测试？")[0] == "用 pytest -q 跑测试，全部通过。"
    for word in ("版本v2发布", "用pytest跑一下", "B站"):  # word-long CJK: still one exact term
        assert parse_query(word).natural is None


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(piece=st.text(alphabet="山水火木金土日月云台", min_size=3, max_size=8))
def test_a_cjk_piece_in_a_sentence_never_loses_a_message_holding_it(
        store: Store, piece: str) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user(f"前面{piece}后面"), user("完全无关的句子")])
    assert f"前面{piece}后面" in top(store, f"我想找{piece}，在哪里？")


def test_with_a_source_filter_a_word_rare_in_that_source_outweighs_its_common_words(
        store: Store) -> None:
    # Two users with the same kind of chat: in each, most messages say they like films and one
    # names a scene. IDF must be counted over the rows the filter keeps, for the collection
    # size too; the highest id of the whole archive made every term look rare and the two
    # common words outweighed the one rare word.
    for name, copies in (("other", 20), ("me", 1)):
        s = store.create_session(source=name)
        for _ in range(copies):
            store.append_messages(s.id, [user(f"{name}喜欢看电影，周末看了一部{n}号电影")
                                         for n in range(5)])
            store.append_messages(s.id, [user(f"{name}觉得那个场景很感人，记住了")])
    hits = store.search(SearchQuery("我最喜欢的电影场景是哪个？", source="me", window=0))
    assert hits and hits[0].content == "me觉得那个场景很感人，记住了"


def test_a_date_in_a_cjk_question_is_one_term_not_its_digits_and_units(store: Store) -> None:
    plan = parse_query("在5月4日我向你借了什么书？").natural
    assert plan is not None and "5月4日" in plan.cjk
    assert not {"月", "日"} & set(plan.cjk) and not plan.words  # no bare 5, 4, 月, 日
    year = parse_query("我在2023年5月4日向你借了书").natural
    assert year is not None and "2023年5月4日" in year.cjk and "日向" not in year.cjk
    s = store.create_session()
    store.append_messages(s.id, [user("我借了你那本书，下周还给你"),
                                 user("上个月5号到4号的日程"), user("今天天气很好"),
                                 user("明天去跑步")])
    assert top(store, "在5月4日我向你借了什么书？")[0] == "我借了你那本书，下周还给你"


def test_a_date_part_of_two_characters_is_one_exact_span_not_its_bare_digit(
        store: Store) -> None:
    """``2일``, ``6号``: a digit joined to one CJK letter is the span, as ``5月6号`` is, not a
    bare ``2`` (which matched ``test_payment_refund_2``, ``v1.2.3``) nor ``일``/``号部``; the
    span is whole: ``16号`` holds no ``6号``."""
    korean = parse_query("5월 2일").natural
    assert korean is not None and {"5월", "2일"} <= set(korean.cjk)
    assert not korean.words and not {"월", "일"} & set(korean.cjk)
    chinese = parse_query("6号部署了什么").natural
    assert chinese is not None and "6号" in chinese.cjk and "部署" in chinese.cjk
    assert not chinese.words and "号部" not in chinese.cjk
    particle = parse_query("2일에 배포했나요?").natural  # 에, the particle, is no term
    assert particle is not None and set(particle.cjk) == {"2일", "배포"}
    s = store.create_session()
    store.append_messages(s.id, [
        user("서버 배포는 5월 2일에 했습니다."), user("5월 12일에 회의가 있어요"),
        user("Step 2: test_payment_refund_2 failed, see v1.2.3 and #1234"),
        user("新的服务器是在5月6号部署的"), user("Step 6: test_payment_refund_6 failed"),
        user("我们什么时候部署了新的服务器？"), user("16号到了"), user("6号到了"),
        user("在6号到了"), user("B站视频")])
    assert top(store, "5월 2일")[0] == "서버 배포는 5월 2일에 했습니다."
    assert top(store, "2일에 배포했나요?") == ["서버 배포는 5월 2일에 했습니다."]
    hits = top(store, "6号部署了什么")
    assert hits[0] == "新的服务器是在5月6号部署的" and "我们什么时候部署了新的服务器？" in hits
    assert "Step 6: test_payment_refund_6 failed" not in hits and "16号到了" not in hits
    assert sorted(top(store, "6号 zzzz")) == sorted(
        ["6号到了", "在6号到了", "新的服务器是在5月6号部署的"])  # not 16号
    assert top(store, "b站 zzzz") == ["B站视频"]  # a letter joined: any case, as trigrams


def test_a_contraction_in_the_stop_list_is_dropped_not_searched_as_a_phrase(
        store: Store) -> None:
    """"don't" is split at its apostrophe into the phrase "don t"; it is a stop word."""
    for question in ("I don't know why the build failed", "why won't the build start",
                     "the build isn't running"):
        plan = parse_query(question).natural
        assert plan is not None
        assert all(t.words[-1] != "t" for t in plan.words), plan
    s = store.create_session()
    store.append_messages(s.id, [user("don't panic, I don't know, don't ask"),
                                 user("the build failed on the runner")])
    assert top(store, "I don't know why the build failed")[0] == "the build failed on the runner"


def test_full_width_input_finds_what_agents_wrote_in_ascii(store: Store) -> None:
    """An input method types full-width letters and digits (ＡＰＩ, ５４３３) and half-width
    katakana; agents write ASCII. A question searches both forms, so it finds either."""
    s = store.create_session()
    store.append_messages(s.id, [
        user("The staging database listens on port 5433."),
        user("APIキーは環境変数に入れてください"),
        user("テスト環境は毎晩リセットされます"),
        user("production port: ５４３２"),  # written full-width: found as typed, too
        user("unrelated note about lunch"),
    ])
    assert top(store, "５４３３") == ["The staging database listens on port 5433."]
    assert top(store, "which port is ５４３３?")[0] == "The staging database listens on port 5433."
    assert "APIキーは環境変数に入れてください" in top(store, "ＡＰＩキーはどこ？")
    assert top(store, "ﾃｽﾄ環境")[0] == "テスト環境は毎晩リセットされます"  # (環境 reaches another)
    assert top(store, "５４３２") == ["production port: ５４３２"]
    # explicit syntax is searched as typed: refold adds no folded form (PostgreSQL's own text
    # search folds full-width characters; SQLite's FTS5 does not)
    assert parse_query('"５４３３"').natural is None


def test_an_ascii_word_glued_inside_cjk_text_is_found(store: Store) -> None:
    """Chinese and Japanese write ASCII words and numbers straight against their text
    (用pytest跑, 端口是5433, APIキー): the word index keeps such a run as one token, so a
    question for the bare word also looks for it, as a whole word, inside CJK messages."""
    s = store.create_session()
    other = store.create_session()
    store.append_messages(s.id, [
        user("用pytest跑一下测试"),
        user("端口是5433。"),
        user("APIキーは環境変数に入れてください"),
        user("run pytest please"),
        user("mypytest is another tool"),
        user("用 pytest 跑"),  # a token of its own: scored once, as a word
    ])
    store.append_messages(other.id, [user("另一个会话也用pytest")])
    assert set(top(store, "pytest")) == {"用pytest跑一下测试", "run pytest please",
                                          "用 pytest 跑", "另一个会话也用pytest"}
    assert "用pytest跑一下测试" in top(store, "how do I run pytest?")
    assert top(store, "pytest 测试")[0] == "用pytest跑一下测试"
    assert top(store, "5433") == ["端口是5433。"]
    assert top(store, "which port is 5433?") == ["端口是5433。"]
    assert top(store, "api") == ["APIキーは環境変数に入れてください"]  # any case
    assert top(store, "543") == [] and top(store, "pyt") == []  # whole words only
    assert set(top(store, "pytest", sort="recency")) == set(top(store, "pytest"))
    # filters hold for the glued messages too
    assert [h.content for h in store.search(SearchQuery("pytest", session_id=other.id))] == [
        "另一个会话也用pytest"]
    # explicit syntax is searched as typed
    assert top(store, '"pytest" AND please') == ["run pytest please"]


def test_a_glued_word_written_full_width_or_before_a_korean_particle_is_found(
        store: Store) -> None:
    s = store.create_session()
    store.append_messages(s.id, [user("ＡＰＩキーを設定してください"), user("ａｐｉの説明です"),
                                 user("API를 사용해서 배포했어요"), user("nothing here")])
    want = ["API를 사용해서 배포했어요", "ａｐｉの説明です", "ＡＰＩキーを設定してください"]
    assert sorted(top(store, "API")) == sorted(want)
    assert sorted(top(store, "ＡＰＩ")) == sorted(want)
    assert sorted(top(store, "where do I set the api?")) == sorted(want)


def test_a_file_or_variable_name_glued_inside_cjk_text_is_found(store: Store) -> None:
    """A chunk of several words (``docker-compose.yml``, ``OPENAI_API_KEY``) is a phrase of
    the word index, which keeps ``yml读取它`` or ``KEYに`` as one token: the chunk is also looked
    for as typed (any case) beside a CJK letter in CJK messages."""
    s = store.create_session()
    env = "API key在.env文件里，docker-compose.yml读取它。"
    ja = "環境変数OPENAI_API_KEYにAPIキーを入れて、設定は~/.config/app/config.tomlです。"
    deploy = "我的API key在哪里？用Docker-Compose部署的"
    store.append_messages(s.id, [
        user(env), user(ja), user(deploy), user("run docker-compose up -d"),
        user("用xdocker-compose部署"), user("docker-compose.yaml读取"),  # other words
        user("another OPENAI_API_KEY_OLD value"), user("nothing here")])
    plan = parse_query("docker-compose.yml").glued
    assert plan is not None and plan.chunks == (("docker compose yml", "docker-compose.yml"),)
    assert top(store, "docker-compose.yml") == [env]
    assert top(store, "where is docker-compose.yml?") == [env]
    assert sorted(top(store, "OPENAI_API_KEY")) == sorted(
        [ja, "another OPENAI_API_KEY_OLD value"])  # (the phrase finds the second)
    assert top(store, "config.toml") == [ja]
    assert top(store, "~/.config/app/config.toml") == [ja]
    assert sorted(top(store, "docker-compose")) == sorted(
        [env, deploy, "run docker-compose up -d", "docker-compose.yaml读取"])
    hits = top(store, "how do I set OPENAI_API_KEY in config.toml?")
    assert hits[0] == ja
    assert top(store, "docker-compose.yml", sort="recency") == [env]
    # explicit syntax is searched as typed
    assert top(store, '"docker compose yml"') == []


def test_a_glued_word_adds_nothing_to_a_message_holding_it_as_a_word(
        sqlite_store: Store) -> None:
    """A message holding the word both glued (``用pytest跑``) and as a word of its own scores
    it once, as a word: the same as a message of as many words holding it once."""
    s = sqlite_store.create_session()
    sqlite_store.append_messages(s.id, [user("pytest 用pytest跑"), user("pytest again"),
                                        user("用 pytest 跑"), user("run pytest please"),
                                        user("用pytest跑一下测试")])
    scores = {h.content: h.score for h in sqlite_store.search(SearchQuery("pytest", window=0))}
    assert scores["pytest 用pytest跑"] == scores["pytest again"]  # two words each, once each
    assert scores["用 pytest 跑"] == scores["run pytest please"]  # three words each
    assert len(scores) == 5
