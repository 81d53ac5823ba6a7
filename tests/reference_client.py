# The reference MemoryClient class of the original memory-service API, unchanged except for the
# quotes of the lifecycle methods' docstrings, which its published copy lost. It must keep working against this server.
# ruff: noqa
import hashlib, hmac, time, json, requests


class MemoryClient:
    """Memory System API 客户端 — 自动处理 HMAC 签名"""

    def __init__(self, api_key, secret, base_url="https://memory.lsz.name"):
        self.api_key = api_key
        self.secret = secret
        self.base_url = base_url

    def _sign(self, method, ts, body=None):
        if method == "GET" or body is None:
            msg = str(ts).encode()  # GET: body = b""
        else:
            msg = str(ts).encode() + json.dumps(body, ensure_ascii=True).encode()
        return hmac.new(self.secret.encode(), msg, hashlib.sha256).hexdigest()

    def _headers(self, method, ts, body=None):
        return {
            "X-API-Key": self.api_key,
            "X-Timestamp": str(ts),
            "X-Signature": self._sign(method, ts, body),
        }

    def get(self, path, params=None):
        ts = int(time.time())
        return requests.get(
            f"{self.base_url}{path}", headers=self._headers("GET", ts), params=params
        )

    def post(self, path, body):
        ts = int(time.time())
        return requests.post(
            f"{self.base_url}{path}", json=body, headers=self._headers("POST", ts, body)
        )

    def put(self, path, body):
        ts = int(time.time())
        return requests.put(
            f"{self.base_url}{path}", json=body, headers=self._headers("PUT", ts, body)
        )

    def delete(self, path):
        ts = int(time.time())
        return requests.delete(f"{self.base_url}{path}", headers=self._headers("DELETE", ts))

    # ---- 便捷方法 ----
    def write_memory(self, agent_id, content, importance=0.5):
        return self.post(
            "/memories/personal",
            {"agent_id": agent_id, "content": content, "importance": importance},
        )

    def search(
        self, agent_id, query, limit=10, min_score=0.3, max_chars_per_memory=0, max_total_chars=0
    ):
        body = {"agent_id": agent_id, "query": query, "limit": limit, "min_score": min_score}
        if max_chars_per_memory:
            body["max_chars_per_memory"] = max_chars_per_memory
        if max_total_chars:
            body["max_total_chars"] = max_total_chars
        return self.post("/memories/personal/search", body)

    def get_recent(self, agent_id, limit=10):
        return self.get(f"/memories/personal/recent/{agent_id}", params={"limit": limit})

    def get_stats(self):
        return self.get("/stats")

    # ---- 生命周期方法 ----
    def extract_facts(self, agent_id, max_memories=20, delete_after=False):
        """从工作记忆提取原子事实"""
        return self.post(
            "/lifecycle/extract-facts",
            {"agent_id": agent_id, "max_memories": max_memories, "delete_after": delete_after},
        )

    def aggregate_scenarios(self, agent_id, max_memories=50):
        """将记忆按主题聚合为场景块"""
        return self.post(
            "/lifecycle/aggregate-scenes", {"agent_id": agent_id, "max_memories": max_memories}
        )

    def get_scenarios(self, agent_id):
        """获取已存储的场景块"""
        return self.get(f"/lifecycle/scenarios/{agent_id}")

    def generate_persona(self, agent_id, max_items=30):
        """从记忆和场景中生成用户画像"""
        return self.post(
            "/lifecycle/generate-persona", {"agent_id": agent_id, "max_items": max_items}
        )

    def get_persona(self, agent_id):
        """获取最新用户画像"""
        return self.get(f"/lifecycle/persona/{agent_id}")

    def set_pipeline_config(self, **kwargs):
        """设置 Pipeline 自动化配置"""
        return self.post("/lifecycle/auto-config", kwargs)

    def get_pipeline_config(self):
        """获取 Pipeline 自动化配置"""
        return self.get("/lifecycle/auto-config")

    def compress(self, agent_id, target_count=5):
        """压缩工作记忆为长期记忆"""
        return self.post(
            "/lifecycle/compress", {"agent_id": agent_id, "target_count": target_count}
        )
