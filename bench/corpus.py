"""Deterministic synthetic agent memories in English and Chinese, for the latency benchmark.

`generate(lang, n, stream="seed")` returns the first `n` distinct items of an endless,
seeded sequence: the 10k corpus is exactly the first 10k of the 100k one (so cached vectors are
shared). Each item is a short memory made from one of 12 templates (preferences, moves, allergies,
meetings, incidents, tickets, holidays, …) with varied names, places, products, numbers and ids,
plus a question about it (for "needle" checks: is the memory found when asked about?).

Other streams ("query", "write") give items that are not in the seeded corpus (the caller checks)
for timed searches and writes.
"""

from __future__ import annotations

# Word lists read better as one string each.
# ruff: noqa: SIM905
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

CATEGORIES = ["general", "preference", "work", "personal", "incident"]


@dataclass(frozen=True)
class Item:
    text: str
    question: str
    category: str
    importance: float


# --- English ----------------------------------------------------------------------------------

EN_FIRST = (
    "Alice Bob Carol David Emma Frank Grace Henry Irene Jack Karen Liam Maria Noah Olivia Peter "
    "Quinn Rachel Samuel Tina Umar Victor Wendy Xavier Yara Zoe Aaron Bella Caleb Diana Ethan "
    "Fiona George Hannah Isaac Julia Kevin Laura Mason Nina Oscar Paula Ryan Sofia Thomas Ursula "
    "Vera William Ximena Yusuf Zack Amir Bianca Chloe Dmitri Elena Felix Gabriel Hugo Ingrid "
    "Jonas Kira Lucas Mei Nikolai Omar Priya Rafael Sven Tariq Uma Valentina Wei Yuki Zara Anders "
    "Beatriz Connor Daria Emil Farah Gustavo Helga Ivan Jasmine Kofi Leila Marco Nadia Otto Pablo"
).split()
EN_LAST = (
    "Chen Smith Garcia Müller Rossi Kowalski Nguyen Tanaka Silva Johnson Brown Dubois Novak "
    "Okafor Patel Kim Larsen Moreau Costa Fischer Haddad Ivanova Jensen Lopez Murphy Nakamura "
    "Olsen Petrov Quinto Reyes Schmidt Torres Varga Wagner Yilmaz Zhang Andersen Becker Castro "
    "Dimitrov Eriksen Ferreira Gomez Horvat Ito Jovanovic Keller Lindqvist Mendes Nilsen O'Brien "
    "Popescu Ramos Sato Thompson Ueda Vogel Walsh Young Zimmermann Abbott Baker Clarke Dawson"
).split()
EN_CITIES = (
    "Berlin Lisbon Toronto Osaka Nairobi Lima Oslo Melbourne Austin Dublin Seoul Prague Denver "
    "Cairo Helsinki Porto Montreal Bangalore Zurich Vienna Seattle Barcelona Krakow Singapore "
    "Edinburgh Auckland Boston Lyon Munich Tallinn Valencia Kyoto Vancouver Athens Budapest"
).split()
EN_DRINKS = [
    "green tea",
    "oat latte",
    "black coffee",
    "jasmine tea",
    "flat white",
    "espresso",
    "chai",
    "matcha",
    "sparkling water",
    "hot chocolate",
    "rooibos",
    "cold brew",
    "mint tea",
]
EN_DAYPARTS = ["morning", "afternoon", "evening", "late night", "lunch break", "first meeting"]
EN_STYLES = [
    "without sugar",
    "with extra milk",
    "very hot",
    "iced",
    "with honey",
    "with lemon",
    "in a large cup",
    "with soy milk",
    "half-strength",
]
EN_PROJECTS = (
    "Atlas Borealis Cobalt Delta Ember Falcon Granite Helix Iris Jupiter Kestrel Lumen Magnet "
    "Nimbus Onyx Pegasus Quartz Radiant Sierra Tundra Umbra Vector Willow Xenon Yonder Zephyr "
    "Aurora Beacon Cascade Dynamo Echo Fjord Glacier Harbor Ion Juniper Kinetic Lattice Meridian"
).split()
EN_COMPANIES = (
    "Acme Globex Initech Umbrella Hooli Vandelay Stark Wayne Cyberdyne Tyrell Soylent Wonka "
    "Oscorp Massive Dynamic Aperture Monarch Gringotts Nakatomi Pied Piper Dunder Mifflin "
    "Sterling Cooper Bluth Prestige Wernham Hogg Virtucon"
).split()
EN_RELATIONS = [
    "daughter",
    "son",
    "wife",
    "husband",
    "partner",
    "mother",
    "father",
    "brother",
    "sister",
    "manager",
    "roommate",
    "best friend",
]
EN_ALLERGENS = [
    "peanuts",
    "shellfish",
    "gluten",
    "lactose",
    "sesame",
    "eggs",
    "soy",
    "tree nuts",
    "strawberries",
    "mustard",
    "celery",
    "kiwi",
]
EN_DISHES = [
    "pad thai",
    "satay",
    "bibimbap",
    "lasagne",
    "tiramisu",
    "pho",
    "risotto",
    "paella",
    "ramen",
    "curry",
    "falafel",
    "dumplings",
    "sushi",
    "tacos",
    "moussaka",
]
EN_WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
EN_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
EN_PLACES = [
    "river",
    "harbour",
    "old railway line",
    "lake shore",
    "canal",
    "city park",
    "beach promenade",
    "forest trail",
    "university campus",
    "botanical garden",
]
EN_COMPONENTS = [
    "database",
    "message queue",
    "cache cluster",
    "search service",
    "API gateway",
    "build runner",
    "payment service",
    "auth server",
    "CDN edge",
    "batch scheduler",
]
EN_RESOURCES = [
    "memory",
    "disk space",
    "file handles",
    "connections",
    "CPU quota",
    "inodes",
    "thread pool slots",
    "IP addresses",
]
EN_PETS = ["dog", "cat", "parrot", "rabbit", "hamster", "tortoise", "ferret", "goldfish"]
EN_PETNAMES = (
    "Biscuit Pepper Mochi Luna Milo Ziggy Nala Oreo Pickles Rocky Tofu Waffles Coco Bruno "
    "Hazel Mango Sprout Pixel Noodle Clover Juniper Maple Olive Pretzel Sushi Tiger Whiskers"
).split()
EN_TOYS = [
    "tennis balls",
    "cardboard boxes",
    "squeaky ducks",
    "laser pointers",
    "rope toys",
    "sunny windowsills",
    "chewing sticks",
    "paper bags",
]
EN_BOOKS = [
    "The Left Hand of Darkness",
    "Thinking, Fast and Slow",
    "Dune",
    "The Pragmatic Programmer",
    "Educated",
    "Sapiens",
    "The Overstory",
    "Project Hail Mary",
    "Designing Data-Intensive Applications",
    "Klara and the Sun",
    "The Three-Body Problem",
    "Atomic Habits",
    "Piranesi",
    "The Remains of the Day",
]
EN_TOPICS = [
    "distributed systems",
    "Roman history",
    "urban gardening",
    "jazz piano",
    "behavioural economics",
    "bird watching",
    "climate policy",
    "sourdough baking",
    "chess openings",
    "typography",
    "marathon training",
    "Japanese woodworking",
]
EN_ISSUES = [
    "timeouts",
    "duplicate invoices",
    "slow exports",
    "login loops",
    "missing emails",
    "wrong currency rounding",
    "broken PDF previews",
    "stale dashboards",
    "failed webhooks",
    "sync conflicts",
]
EN_COUNTRIES = [
    "Portugal",
    "Japan",
    "Iceland",
    "Mexico",
    "Vietnam",
    "Kenya",
    "Norway",
    "Peru",
    "Greece",
    "New Zealand",
    "Morocco",
    "Chile",
    "Croatia",
    "Thailand",
]
EN_REPLY_STYLES = [
    "short",
    "bullet-point",
    "formal",
    "very detailed",
    "friendly",
    "numbers-first",
    "one-paragraph",
]
EN_DISLIKES = [
    "jargon",
    "emoji",
    "long preambles",
    "passive voice",
    "vague estimates",
    "screenshots of code",
    "acronyms",
]
EN_INSTRUMENTS = [
    "cello",
    "violin",
    "saxophone",
    "drums",
    "bass guitar",
    "piano",
    "trumpet",
    "ukulele",
    "flute",
    "accordion",
]
EN_VENUES = [
    "the Blue Note bar",
    "a jazz café",
    "the community hall",
    "church concerts",
    "open-mic nights",
    "the harbour festival",
    "a rooftop club",
]


def _en_item(r: random.Random) -> Item:
    name = f"{r.choice(EN_FIRST)} {r.choice(EN_LAST)}"
    kind = r.randrange(12)
    c = r.choice
    if kind == 0:
        t = f"{name} prefers {c(EN_DRINKS)} in the {c(EN_DAYPARTS)} and always takes it {c(EN_STYLES)}."
        q, cat = f"What does {name} like to drink?", "preference"
    elif kind == 1:
        city, proj = c(EN_CITIES), c(EN_PROJECTS)
        t = (
            f"{name} moved to {city} in {c(EN_MONTHS)} {r.randint(2009, 2025)} to work on the "
            f"{proj} project at {c(EN_COMPANIES)}."
        )
        q, cat = f"When did {name} move to {city}?", "personal"
    elif kind == 2:
        rel = c(EN_RELATIONS)
        t = (
            f"{name}'s {rel} is allergic to {c(EN_ALLERGENS)}, so avoid {c(EN_DISHES)} when "
            f"planning dinner."
        )
        q, cat = f"What is {name}'s {rel} allergic to?", "personal"
    elif kind == 3:
        proj = c(EN_PROJECTS)
        t = (
            f"Meeting with {name} on {c(EN_WEEKDAYS)}: agreed to cut the {proj} budget by "
            f"{r.randint(3, 40)}% before {c(EN_MONTHS)}."
        )
        q, cat = f"What did we agree with {name} about the {proj} budget?", "work"
    elif kind == 4:
        t = (
            f"{name} runs {r.randint(3, 42)} km every {c(EN_WEEKDAYS)} along the {c(EN_PLACES)} "
            f"and is training for the {c(EN_CITIES)} marathon."
        )
        q, cat = f"How far does {name} run?", "personal"
    elif kind == 5:
        proj = c(EN_PROJECTS)
        t = (
            f"The {proj} deploy failed at {r.randint(0, 23):02d}:{r.randint(0, 59):02d} because "
            f"the {c(EN_COMPONENTS)} ran out of {c(EN_RESOURCES)}; {name} fixed it."
        )
        q, cat = f"Why did the {proj} deploy fail?", "incident"
    elif kind == 6:
        pet = c(EN_PETS)
        t = f"{name} has a {pet} named {c(EN_PETNAMES)} who loves {c(EN_TOYS)}."
        q, cat = f"What is the name of {name}'s {pet}?", "personal"
    elif kind == 7:
        t = f"{name} is reading '{c(EN_BOOKS)}' and wants recommendations about {c(EN_TOPICS)}."
        q, cat = f"What book is {name} reading?", "preference"
    elif kind == 8:
        comp, issue = c(EN_COMPANIES), c(EN_ISSUES)
        t = (
            f"Customer {comp} (account AC-{r.randint(10000, 99999)}) reported {issue} in the "
            f"{c(EN_COMPONENTS)}; ticket T-{r.randint(1000, 99999)} is assigned to {name}."
        )
        q, cat = f"Who handles the {issue} ticket for {comp}?", "work"
    elif kind == 9:
        m1 = r.randrange(12)
        t = (
            f"{name} will be on vacation in {c(EN_COUNTRIES)} from {EN_MONTHS[m1]} "
            f"{r.randint(1, 28)} to {EN_MONTHS[(m1 + r.randint(0, 1)) % 12]} {r.randint(1, 28)}."
        )
        q, cat = f"When is {name} on vacation?", "personal"
    elif kind == 10:
        t = (
            f"{name} prefers {c(EN_REPLY_STYLES)} replies and dislikes {c(EN_DISLIKES)} in "
            f"status reports."
        )
        q, cat = f"How does {name} like replies to be written?", "preference"
    else:
        t = (
            f"{name} learned to play the {c(EN_INSTRUMENTS)} at age {r.randint(5, 60)} and "
            f"performs at {c(EN_VENUES)} on {c(EN_WEEKDAYS)}s."
        )
        q, cat = f"Which instrument does {name} play?", "personal"
    return Item(t, q, cat if r.random() < 0.8 else c(CATEGORIES), round(r.uniform(0.1, 0.95), 2))


# --- Chinese ----------------------------------------------------------------------------------

ZH_SURNAMES = list(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶程"
)
ZH_GIVEN = (
    "伟 芳 娜 秀英 敏 静 丽 强 磊 军 洋 勇 艳 杰 娟 涛 明 超 秀兰 霞 平 刚 桂英 晨 浩 宇 欣怡 "
    "子涵 梓萱 一诺 思远 雨桐 嘉怡 俊杰 志强 建华 晓东 海燕 文博 雪梅 国庆 春生 佳琪 天佑 "
    "梦瑶 若曦 昊然 诗涵 博文 子墨 可馨 浩宇 锦程 婉清 振华 雅静 立新 晓峰 玉兰 德明 丹丹"
).split()
ZH_CITIES = (
    "北京 上海 深圳 杭州 成都 武汉 西安 南京 苏州 重庆 厦门 青岛 大连 长沙 昆明 哈尔滨 "
    "天津 广州 合肥 郑州 济南 福州 贵阳 兰州 乌鲁木齐 拉萨 三亚 桂林 宁波 无锡"
).split()
ZH_DRINKS = [
    "龙井茶",
    "燕麦拿铁",
    "美式咖啡",
    "茉莉花茶",
    "普洱茶",
    "豆浆",
    "柠檬水",
    "抹茶拿铁",
    "乌龙茶",
    "热可可",
    "菊花茶",
    "冷萃咖啡",
    "大麦茶",
]
ZH_DAYPARTS = ["早上", "中午", "下午", "晚上", "午休时", "开会前", "加班时"]
ZH_STYLES = [
    "不加糖",
    "多加奶",
    "要烫一点",
    "加冰",
    "加蜂蜜",
    "少放茶叶",
    "用大杯",
    "换成豆奶",
    "做成半糖",
]
ZH_PROJECTS = (
    "支付系统重构 数据中台 推荐引擎 风控平台 会员体系 物流调度 客服机器人 搜索改版 "
    "供应链看板 直播带货 小程序商城 智能排班 发票识别 用户画像 广告投放 日志平台 "
    "权限中心 消息推送 灰度发布 容量规划 跨境结算 门店巡检 电子合同 知识库"
).split()
ZH_COMPANIES = (
    "星河科技 蓝海数据 云帆网络 鼎盛集团 华章软件 青木咨询 远航物流 金桥银行 "
    "锦绣传媒 天工智能 九州通信 嘉禾食品 长风汽车 瑞丰医药 明德教育 北辰地产"
).split()
ZH_RELATIONS = [
    "女儿",
    "儿子",
    "妻子",
    "丈夫",
    "母亲",
    "父亲",
    "哥哥",
    "妹妹",
    "领导",
    "室友",
    "好朋友",
]
ZH_ALLERGENS = [
    "花生",
    "海鲜",
    "麸质",
    "乳糖",
    "芝麻",
    "鸡蛋",
    "大豆",
    "坚果",
    "芒果",
    "菠萝",
    "酒精",
]
ZH_DISHES = [
    "宫保鸡丁",
    "麻婆豆腐",
    "水煮鱼",
    "担担面",
    "北京烤鸭",
    "小龙虾",
    "煎饼果子",
    "芝麻汤圆",
    "清蒸鲈鱼",
    "酸菜鱼",
    "西湖醋鱼",
    "糖醋排骨",
    "蚝油生菜",
    "炸酱面",
]
ZH_WEEKDAYS = ["一", "二", "三", "四", "五", "六", "日"]
ZH_PLACES = [
    "西湖边",
    "滨江步道",
    "奥林匹克公园",
    "小区操场",
    "黄浦江边",
    "大学校园",
    "湿地公园",
    "老城墙",
    "海滨栈道",
    "植物园",
]
ZH_COMPONENTS = [
    "数据库",
    "消息队列",
    "缓存集群",
    "搜索服务",
    "网关",
    "构建机",
    "支付服务",
    "认证服务",
    "定时任务",
    "对象存储",
]
ZH_RESOURCES = ["内存", "磁盘空间", "文件句柄", "数据库连接", "CPU配额", "线程池", "带宽"]
ZH_PETS = ["狗", "猫", "鹦鹉", "兔子", "仓鼠", "乌龟", "金鱼", "柯基"]
ZH_PETNAMES = (
    "豆豆 团子 可乐 旺财 咪咪 花卷 年糕 汤圆 糯米 奶茶 布丁 球球 大黄 小白 雪球 馒头 芝麻 元宝 土豆 橘子"
).split()
ZH_TOYS = ["网球", "纸箱子", "逗猫棒", "毛线球", "晒太阳", "磨牙棒", "追激光笔", "钻被窝"]
ZH_BOOKS = [
    "三体",
    "活着",
    "平凡的世界",
    "人类简史",
    "围城",
    "百年孤独",
    "红楼梦",
    "置身事内",
    "穷查理宝典",
    "思考，快与慢",
    "乡土中国",
    "长安的荔枝",
    "黑客与画家",
    "万历十五年",
]
ZH_TOPICS = [
    "分布式系统",
    "宋代历史",
    "阳台种菜",
    "爵士钢琴",
    "行为经济学",
    "观鸟",
    "碳中和政策",
    "烘焙面包",
    "围棋定式",
    "书法",
    "马拉松训练",
    "木工手艺",
]
ZH_ISSUES = [
    "超时",
    "重复开票",
    "导出很慢",
    "登录死循环",
    "收不到邮件",
    "金额四舍五入错误",
    "预览失败",
    "报表数据不更新",
    "回调失败",
    "同步冲突",
]
ZH_COUNTRIES = [
    "葡萄牙",
    "日本",
    "冰岛",
    "墨西哥",
    "越南",
    "肯尼亚",
    "挪威",
    "秘鲁",
    "希腊",
    "新西兰",
    "摩洛哥",
    "智利",
    "泰国",
    "新加坡",
]
ZH_REPLY_STYLES = ["简洁", "分点列出", "正式", "非常详细", "轻松友好", "先给数字", "一段话说完"]
ZH_DISLIKES = [
    "行业黑话",
    "表情符号",
    "冗长的开场白",
    "被动语态",
    "含糊的估计",
    "代码截图",
    "英文缩写",
]
ZH_INSTRUMENTS = [
    "大提琴",
    "小提琴",
    "萨克斯",
    "架子鼓",
    "贝斯",
    "钢琴",
    "小号",
    "古筝",
    "二胡",
    "琵琶",
]
ZH_VENUES = [
    "蓝调酒吧",
    "爵士咖啡馆",
    "社区活动中心",
    "音乐节",
    "livehouse",
    "大学礼堂",
    "屋顶花园",
]


def _zh_item(r: random.Random) -> Item:
    name = r.choice(ZH_SURNAMES) + r.choice(ZH_GIVEN)
    kind = r.randrange(12)
    c = r.choice
    if kind == 0:
        t = f"{name}喜欢在{c(ZH_DAYPARTS)}喝{c(ZH_DRINKS)}，而且一定要{c(ZH_STYLES)}。"
        q, cat = f"{name}喜欢喝什么？", "preference"
    elif kind == 1:
        city = c(ZH_CITIES)
        t = (
            f"{name}于{r.randint(2009, 2025)}年{r.randint(1, 12)}月搬到{city}，在{c(ZH_COMPANIES)}"
            f"负责{c(ZH_PROJECTS)}项目。"
        )
        q, cat = f"{name}什么时候搬到{city}的？", "personal"
    elif kind == 2:
        rel = c(ZH_RELATIONS)
        t = f"{name}的{rel}对{c(ZH_ALLERGENS)}过敏，安排聚餐时不要点{c(ZH_DISHES)}。"
        q, cat = f"{name}的{rel}对什么过敏？", "personal"
    elif kind == 3:
        proj = c(ZH_PROJECTS)
        t = (
            f"周{c(ZH_WEEKDAYS)}和{name}开会，同意在{r.randint(1, 12)}月前把{proj}预算削减"
            f"{r.randint(3, 40)}%。"
        )
        q, cat = f"和{name}开会时关于{proj}预算达成了什么共识？", "work"
    elif kind == 4:
        t = (
            f"{name}每周{c(ZH_WEEKDAYS)}沿着{c(ZH_PLACES)}跑{r.randint(3, 42)}公里，正在为"
            f"{c(ZH_CITIES)}马拉松做准备。"
        )
        q, cat = f"{name}每次跑多远？", "personal"
    elif kind == 5:
        proj = c(ZH_PROJECTS)
        t = (
            f"{proj}发布在{r.randint(0, 23)}点{r.randint(0, 59)}分失败，原因是{c(ZH_COMPONENTS)}的"
            f"{c(ZH_RESOURCES)}耗尽，{name}已经修复。"
        )
        q, cat = f"{proj}发布为什么失败？", "incident"
    elif kind == 6:
        pet = c(ZH_PETS)
        t = f"{name}养了一只叫{c(ZH_PETNAMES)}的{pet}，它最喜欢{c(ZH_TOYS)}。"
        q, cat = f"{name}的{pet}叫什么名字？", "personal"
    elif kind == 7:
        t = f"{name}正在读《{c(ZH_BOOKS)}》，想要一些关于{c(ZH_TOPICS)}的推荐。"
        q, cat = f"{name}在读什么书？", "preference"
    elif kind == 8:
        comp, issue = c(ZH_COMPANIES), c(ZH_ISSUES)
        t = (
            f"客户{comp}（账号AC-{r.randint(10000, 99999)}）反馈{c(ZH_COMPONENTS)}出现{issue}，"
            f"工单T-{r.randint(1000, 99999)}已分配给{name}。"
        )
        q, cat = f"{comp}的{issue}工单由谁负责？", "work"
    elif kind == 9:
        m1 = r.randint(1, 12)
        t = (
            f"{name}将于{m1}月{r.randint(1, 28)}日到{(m1 + r.randint(0, 1) - 1) % 12 + 1}月"
            f"{r.randint(1, 28)}日在{c(ZH_COUNTRIES)}休假。"
        )
        q, cat = f"{name}什么时候休假？", "personal"
    elif kind == 10:
        t = f"{name}喜欢{c(ZH_REPLY_STYLES)}的回复，不喜欢汇报里有{c(ZH_DISLIKES)}。"
        q, cat = f"{name}喜欢什么样的回复？", "preference"
    else:
        t = (
            f"{name}{r.randint(5, 60)}岁开始学{c(ZH_INSTRUMENTS)}，每周{c(ZH_WEEKDAYS)}在"
            f"{c(ZH_VENUES)}演出。"
        )
        q, cat = f"{name}会演奏什么乐器？", "personal"
    return Item(t, q, cat if r.random() < 0.8 else c(CATEGORIES), round(r.uniform(0.1, 0.95), 2))


MAKERS: dict[str, Callable[[random.Random], Item]] = {"en": _en_item, "zh": _zh_item}


def stream(lang: str, name: str = "seed") -> Iterator[Item]:
    """Endless deterministic sequence of distinct items for (lang, name)."""
    make = MAKERS[lang]
    r = random.Random(f"memory-bench:{lang}:{name}")
    seen: set[str] = set()
    while True:
        item = make(r)
        if item.text in seen:
            continue
        seen.add(item.text)
        yield item


def generate(lang: str, n: int, name: str = "seed") -> list[Item]:
    out: list[Item] = []
    for item in stream(lang, name):
        if len(out) >= n:
            break
        out.append(item)
    return out


def fresh(lang: str, n: int, name: str, exclude: set[str]) -> list[Item]:
    """n items of another stream whose text is not in `exclude` (e.g. the seeded corpus)."""
    out: list[Item] = []
    for item in stream(lang, name):
        if len(out) >= n:
            break
        if item.text not in exclude:
            out.append(item)
    return out
