"""A language the embedding model never learnt, through the HTTP API: what a default search
returns (docs/search.md, "Scripts the model does not read").

Sixteen memories of one agent — a user's preferences, home, work, a server, a meeting, a flight —
written for this probe in Vietnamese (Latin letters the default model reads, a language it never
learnt), and the same sixteen in Russian (a language it learnt) as the yardstick. Twenty
questions each memory answers (sixteen sharing words with it, four paraphrases that share
few), and eight questions nothing answers. Every question is asked with the default search
(`limit` 10, `min_score` 0.3) in the modes `hybrid` (the default), `keyword` and `vector`, and
in `hybrid` with `min_score` 0.

Counts: the answer first (R@1), the answer returned, the other memories returned alongside
answers ("wrong"), and the unanswerable questions that returned anything (false positives).
Hand-written, small and seen while the rule was written: a check, not a benchmark.

    .venv/bin/python bench/study/language_probe.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from common import BenchServer

from memoryplatform.client import MemoryClient

PROBES: dict[str, tuple[list[str], list[tuple[str, int]], list[str]]] = {
    "vi": (
        [
            "Người dùng thích uống trà xanh vào buổi sáng.",
            "Người dùng sống ở thành phố Đà Nẵng.",
            "Mật khẩu máy chủ được thay đổi mỗi tháng.",
            "Cuộc họp nhóm diễn ra vào thứ Ba hàng tuần.",
            "Con mèo của người dùng tên là Mướp.",
            "Người dùng bị dị ứng với đậu phộng.",
            "Dự án phải hoàn thành trước ngày 15 tháng 12.",
            "Người dùng làm kỹ sư phần mềm tại một công ty ngân hàng.",
            "Người dùng thích đọc sách lịch sử vào cuối tuần.",
            "Cơ sở dữ liệu chính chạy trên PostgreSQL phiên bản 16.",
            "Người dùng muốn câu trả lời ngắn gọn, không dài dòng.",
            "Vợ của người dùng là giáo viên tiếng Anh.",
            "Người dùng đang học chơi đàn guitar.",
            "Chuyến bay tới Tokyo khởi hành lúc 7 giờ sáng thứ Sáu.",
            "Ngân sách quảng cáo tháng này là 50 triệu đồng.",
            "Người dùng không ăn thịt bò.",
        ],
        [
            ("Người dùng thích uống gì vào buổi sáng?", 0),
            ("Người dùng sống ở đâu?", 1),
            ("Bao lâu thì đổi mật khẩu máy chủ?", 2),
            ("Khi nào có cuộc họp nhóm?", 3),
            ("Con mèo tên gì?", 4),
            ("Người dùng dị ứng với thứ gì?", 5),
            ("Hạn chót của dự án là khi nào?", 6),
            ("Người dùng làm nghề gì?", 7),
            ("Sở thích cuối tuần của người dùng là gì?", 8),
            ("Chúng ta dùng hệ quản trị cơ sở dữ liệu nào?", 9),
            ("Người dùng thích phong cách trả lời như thế nào?", 10),
            ("Vợ người dùng làm nghề gì?", 11),
            ("Người dùng đang học nhạc cụ nào?", 12),
            ("Máy bay đi Nhật Bản cất cánh lúc mấy giờ?", 13),
            ("Chi phí quảng cáo tháng này bao nhiêu?", 14),
            ("Người dùng có ăn thịt bò không?", 15),
            ("Thức uống buổi sớm yêu thích?", 0),
            ("Thành phố cư trú?", 1),
            ("Ai là người nuôi thú cưng?", 4),
            ("Khi nào bay sang Nhật?", 13),
        ],
        [
            "Thời tiết hôm nay thế nào?",
            "Tỷ số trận bóng đá tối qua là bao nhiêu?",
            "Giá vàng hôm nay là bao nhiêu?",
            "Ai đã thắng giải Oscar năm nay?",
            "Cách nấu phở bò ngon?",
            "Xe ô tô của người dùng màu gì?",
            "Người dùng có bao nhiêu anh chị em?",
            "Mã xác thực hai lớp được gửi qua đâu?",
        ],
    ),
    "ru": (
        [
            "Пользователь любит пить зелёный чай по утрам.",
            "Пользователь живёт в Казани.",
            "Пароль сервера меняется каждый месяц.",
            "Встреча команды проходит каждый вторник.",
            "Кошку пользователя зовут Мурка.",
            "У пользователя аллергия на арахис.",
            "Проект нужно закончить до 15 декабря.",
            "Пользователь работает инженером-программистом в банке.",
            "По выходным пользователь читает книги по истории.",
            "Основная база данных работает на PostgreSQL версии 16.",
            "Пользователь хочет короткие ответы, без длинных объяснений.",
            "Жена пользователя — учитель английского языка.",
            "Пользователь учится играть на гитаре.",
            "Рейс в Токио вылетает в 7 утра в пятницу.",
            "Рекламный бюджет в этом месяце — 50 тысяч рублей.",
            "Пользователь не ест говядину.",
        ],
        [
            ("Что пользователь любит пить по утрам?", 0),
            ("Где живёт пользователь?", 1),
            ("Как часто меняется пароль сервера?", 2),
            ("Когда встреча команды?", 3),
            ("Как зовут кошку?", 4),
            ("На что у пользователя аллергия?", 5),
            ("Какой срок сдачи проекта?", 6),
            ("Кем работает пользователь?", 7),
            ("Чем пользователь занимается по выходным?", 8),
            ("Какую систему управления базами данных мы используем?", 9),
            ("Какие ответы предпочитает пользователь?", 10),
            ("Кем работает жена пользователя?", 11),
            ("На каком инструменте учится играть пользователь?", 12),
            ("Во сколько вылетает самолёт в Японию?", 13),
            ("Сколько стоит реклама в этом месяце?", 14),
            ("Ест ли пользователь говядину?", 15),
            ("Любимый утренний напиток?", 0),
            ("Город проживания?", 1),
            ("У кого есть домашнее животное?", 4),
            ("Когда лететь в Японию?", 13),
        ],
        [
            "Какая сегодня погода?",
            "Какой был счёт футбольного матча вчера вечером?",
            "Сколько сегодня стоит золото?",
            "Кто получил Оскар в этом году?",
            "Как приготовить борщ?",
            "Какого цвета машина пользователя?",
            "Сколько у пользователя братьев и сестёр?",
            "Куда приходит код двухфакторной аутентификации?",
        ],
    ),
}
# (mode, min_score): the default search in each mode, and the default mode with no floor.
MODES = (("hybrid", 0.3), ("keyword", 0.3), ("vector", 0.3), ("hybrid", 0.0))


def probe(
    client: MemoryClient, lang: str, mode: str, min_score: float, ids: list[int]
) -> dict[str, int]:
    _, answered, unanswerable = PROBES[lang]
    out = {"r1": 0, "returned": 0, "wrong": 0, "fp": 0, "fp_results": 0}
    for question, answer in answered:
        hits = [h["id"] for h in client.search(lang, question, mode=mode, min_score=min_score)]
        out["r1"] += hits[:1] == [ids[answer]]
        out["returned"] += ids[answer] in hits
        out["wrong"] += sum(1 for h in hits if h != ids[answer])
    for question in unanswerable:
        hits = client.search(lang, question, mode=mode, min_score=min_score)
        out["fp"] += bool(hits)
        out["fp_results"] += len(hits)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.parse_args()
    with BenchServer() as server:
        client = MemoryClient(server.api_key, server.secret, base_url=server.base_url)
        print("| language | mode | R@1 | returned | wrong returned | unanswerable with results |")
        print("| --- | --- | --- | --- | --- | --- |")
        for lang, (memories, answered, unanswerable) in PROBES.items():
            ids = [client.write_memory(lang, text)["id"] for text in memories]
            for mode, min_score in MODES:
                r = probe(client, lang, mode, min_score, ids)
                n, m = len(answered), len(unanswerable)
                print(
                    f"| {lang} | {mode}, min_score {min_score:g} | {r['r1']}/{n} | {r['returned']}/{n} | {r['wrong']} "
                    f"| {r['fp']}/{m} ({r['fp_results']} results) |"
                )


if __name__ == "__main__":
    main()
