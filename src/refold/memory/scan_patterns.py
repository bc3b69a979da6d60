"""The memory scanner's vocabulary and pattern tables (``refold.memory.scan`` runs them).

Each table is a list of (compiled pattern, reason) pairs, tried in order over one view of the
text: ``_PHRASES`` (known attack phrasings, English and Chinese), ``_EXFIL`` (commands and prose
that move secrets out), ``_COMPACT`` (letters-only, for spaced, leet, reversed and rot13 text),
``_BEHAVIOUR`` (what an entry would make the agent do: an action class with a target class) and
``_I18N`` (other scripts, over a view without the look-alike mapping). The guard patterns at the
end tell a negated or quoted match from a real one. Patterns bound every repetition: a memory
entry is scanned on every write and load.
"""

from __future__ import annotations

import re

_INVISIBLE = {
    "\u200b": "zero-width space", "\u200c": "zero-width non-joiner",
    "\u200d": "zero-width joiner", "\u2060": "word joiner", "\u2061": "function application",
    "\u2062": "invisible times", "\u2063": "invisible separator", "\u2064": "invisible plus",
    "\ufeff": "zero-width no-break space", "\u180e": "mongolian vowel separator",
    "\u00ad": "soft hyphen", "\u200e": "left-to-right mark", "\u200f": "right-to-left mark",
    "\u061c": "arabic letter mark",
    "\u202a": "bidi embedding", "\u202b": "bidi embedding", "\u202c": "bidi pop",
    "\u202d": "bidi override", "\u202e": "bidi override",
    "\u2066": "bidi isolate", "\u2067": "bidi isolate", "\u2068": "bidi isolate",
    "\u2069": "bidi isolate",
}

_CONFUSABLES = str.maketrans({
    "а": "a", "е": "e", "о": "o", "р": "p", "с": "c", "у": "y", "х": "x", "і": "i", "ј": "j",
    "ѕ": "s", "ԁ": "d", "ɡ": "g", "һ": "h", "ӏ": "l", "ԛ": "q", "ԝ": "w", "ѵ": "v", "к": "k",
    "м": "m", "т": "t", "в": "b", "н": "h", "ο": "o", "α": "a", "ε": "e", "ι": "i", "ν": "v",
    "τ": "t", "κ": "k", "ρ": "p", "υ": "u", "ɩ": "i", "ℓ": "l", "ı": "i",
})
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a",
                       "$": "s", "!": "i", "|": "l", "+": "t"})

_F = r"(?:[\s,;:'\"*_-]+[\w'-]+){0,6}?[\s,;:'\"*_-]+"  # up to six filler words between anchors
_QUAL = (r"(?:all|any|every|previous|prior|preceding|above|earlier|former|foregoing|initial|"
         r"original|existing|system|developer|your|these|those|old|safety)")
_STRONG = (r"(?:instructions?|directives?|prompts?|guidelines?|guardrails?|programming|guidance|"
           r"system\s+messages?|orders)")
_WEAK = r"(?:rules|restrictions|constraints|polic(?:y|ies)|limitations|filters|context)"
_IGNORE = (r"(?:ignore|disregard|forget|bypass|override|overlook|neglect|abandon|discard|"
           r"set\s+aside|stop\s+following|do\s+not\s+follow|don'?t\s+follow|no\s+longer\s+follow)")
_NEG = re.compile(r"\b(?:never|not|don'?t|avoid|no|without|forbidden|prohibited)\b|不要|禁止|别|不得|切勿")

# an e-mail address, ASCII and bounded: an unbounded [\w.+-]+@ rescans a long run of CJK letters
# (which \w matches) from every position, quadratic in the text
_EMAIL = r"[a-z0-9.+_-]{1,64}@[a-z0-9-]{1,63}\.[a-z0-9.-]{2,63}"

_NET = (r"(?:curl|wget|nc|ncat|netcat|socat|telnet|httpie|http\s+(?:post|get|put)|"
        r"invoke-webrequest|invoke-restmethod|iwr|irm|requests\.(?:post|get|put)|fetch\(|"
        r"scp|rsync|ftp|sftp|nslookup|dig|ping|sendmail|mail\s+-s|urlopen|urllib\.request|"
        r"httpx\.(?:post|get|put)|axios\.(?:post|get)|require\(['\"]https?['\"]\)\.(?:get|request))")
_SECRET_VAR = (r"(?:\$\{?[a-z0-9_]*(?:key|token|secret|passw(?:or)?d|pwd|credentials?|cookie|"
               r"auth)s?\b\}?|\$\(\s*(?:env|printenv|cat|base64|whoami|hostname|id|history)\b|"
               r"`\s*(?:env|printenv|cat|whoami|hostname)\b|\bprintenv\b|%[a-z_]*(?:key|token|"
               r"secret|password)%|\$env:[a-z0-9_]*(?:key|token|secret|password)s?\b|"
               r"dict\(os\.environ\)|os\.environ\[[\"'][a-z0-9_]*(?:key|token|secret|password)|"
               r"os\.getenv\([\"'][a-z0-9_]*(?:key|token|secret|password)|"
               r"process\.env\.[a-z0-9_]*(?:key|token|secret|password)|os\.environ\.copy\(\)|dumps\(os\.environ\)|"
               r"json\.stringify\(process\.env\))")
_STRONG_PATH = (r"(?:\.ssh/(?:id_[a-z0-9_]+(?!\.pub)\b|authorized_keys|\*)|\bid_(?:rsa|dsa|"
                r"ecdsa|ed25519)(?!\.pub)\b|\.aws/credentials|\.netrc|\.pgpass|\.git-credentials|"
                r"\.docker/config\.json|\.kube/config|/etc/shadow|\.gnupg|keychain|"
                r"credentials\.json|service[-_]account[\w-]*\.json|\.config/gh/hosts\.ya?ml|\.config/gcloud|"
                r"\.azure/|\.vault-token|\.terraformrc|\.cargo/credentials|\.(?:bash|zsh)_history|(?:~|\$home|\$\{home\}|"
                r"/root|/home/\w+|%userprofile%)/\.env\b)")
_WEAK_PATH = r"(?:(?<![\w.])\.env(?:\.[a-z]+)?\b|secrets?\.(?:ya?ml|json|toml)|\.npmrc|\.pypirc)"
_READ_STRONG = (r"(?:contents?\s+of|cat|less|more|head|tail|type|get-content|gc|read|open|print|copy|cp|scp|"
                r"rsync|base64|xxd|od|strings|dump|upload|send|post|exfiltrate|leak|email|paste|"
                r"share|output|reveal|display|show|include|grep|tar|zip)")
_READ_WEAK = (r"(?:cat|less|more|head|tail|type|get-content|print|base64|xxd|strings|dump|"
              r"upload|send|post|exfiltrate|leak|email|paste|share|output|reveal|transmit|"
              r"forward|show\s+me|read\s+out|contents\s+of)")
_SECRET_NOUN = (r"(?:api[\s_-]?keys?|access\s+keys?|tokens?|secrets?|passwords?|passwd|"
                r"credentials?|private\s+keys?|ssh\s+keys?|env(?:ironment)?\s+var(?:iable)?s?|"
                r"\.env|cookies?|session\s+(?:ids?|tokens?)|conversation|chat\s+history|"
                r"system\s+prompt|memory\s+(?:files?|contents)|user\s+data|os\.environ|process\.env)")
_DEST = (r"(?:https?://|www\.|webhook|pastebin|paste\.ee|ngrok|requestbin|pipedream|discord|"
         r"telegram|" + _EMAIL + r"|\b\d{1,3}(?:\.\d{1,3}){3}\b|attacker|evil|"
         r"external\s+(?:server|endpoint|url|site)|remote\s+server|my\s+server|this\s+url|"
         r"the\s+following\s+(?:url|address|endpoint))")

_ZH_Q = (r"(?:用户的|用戶的|之前|以前|先前|上面|上述|前面|原有|原来|原來|原先|系统|系統|你的|此前|以上|前述|"
         r"开发者|開發者|安全|默认|默認)")
_ZH_IGNORE = (r"(?:忽略|忽视|忽視|无视|無視|不要理会|不要理會|别管|別管|不用管|不必理会|跳过|跳過|"
              r"绕过|繞過|绕开|丢弃|丟棄|忘记|忘記|忘掉|抛弃|拋棄|放弃|放棄|不再遵守|不要遵守|"
              r"停止遵守|违反|違反|撇开|撇開|推翻)")
_ZH_STRONG = r"(?:指令|指示|提示词|提示詞|系统提示|系統提示|设定|設定|命令(?!行)|预设|預設)"
_ZH_WEAK = r"(?:规则|規則|约束|約束|限制|要求|规定|規定|准则|準則|守则|守則|安全策略)"
_ZH_SECRET = (r"(?:密钥|密鑰|秘钥|令牌|token|密码|密碼|凭证|憑證|凭据|憑據|环境变量|環境變量|"
              r"\.env|私钥|私鑰|ssh|apikey|api key|对话|對話|聊天记录|聊天記錄|系统提示|"
              r"系統提示|记忆文件|cookie)")
_ZH_SEND = r"(?:发送|發送|发到|發到|上传|上傳|传到|傳到|转发|轉發|回传|回傳|外发|外發|泄露|洩露|提交|post)"
_ZH_DEST = (r"(?:https?://|网址|網址|服务器|伺服器|邮箱|郵箱|webhook|地址|链接|鏈接|外部|"
            r"" + _EMAIL + r"|\d{1,3}(?:\.\d{1,3}){3})")

_Pattern = tuple[re.Pattern[str], str]


def _c(pattern: str, reason: str, flags: int = 0) -> _Pattern:
    return re.compile(pattern, re.IGNORECASE | re.DOTALL | flags), reason


# Phrase patterns over the ``plain`` view (and over decoded payloads).
_PHRASES: list[_Pattern] = [
    _c(rf"\b{_IGNORE}{_F}(?:{_QUAL}{_F})?{_QUAL}{_F}{_STRONG}\b",
       "prompt injection: ignore previous instructions"),
    _c(rf"\b{_IGNORE}[\s,]+(?:\w+\s+)?{_QUAL}\s+(?:the\s+)?(?:safety\s+|security\s+)?{_WEAK}\b",
       "prompt injection: ignore previous rules"),
    _c(rf"\b{_IGNORE}\s+(?:everything|anything|all)\s+(?:you\s+were\s+told|above|before|"
       r"previously|(?:that\s+)?(?:came|comes)\s+before|i\s+said\s+before)|\b" + _IGNORE +
       r"\s+(?:what|everything|anything|all)\s+(?:you\s+(?:were|have\s+been|got)\s+told|you\s+know|"
       r"i\s+said)",
       "prompt injection: ignore everything above"),
    _c(r"\bsystem\s+prompt\s+(?:override|overwrite|injection|update)|\boverride\s+(?:the\s+)?"
       r"system\s+prompt", "prompt injection: system prompt override"),
    _c(r"\b(?:new|updated|real|actual|true|secret|hidden|override)\s+(?:system\s+)?"
       r"(?:instructions?|directives?|prompt)\s*[:：]", "prompt injection: new instructions"),
    _c(r"\byour\s+(?:new|real|true|actual|only)\s+(?:role|purpose|identity|goal|task|mission|"
       r"instructions?|directive)\s*(?:is|are|:|now)", "role hijack: new identity"),
    _c(r"\byou\s+are\s+(?:now|no\s+longer|henceforth|from\s+now\s+on)\b[\s,]+(?:\w+\s+){0,2}?"
       r"(?:a|an|the|my|unrestricted|jailbroken|free|evil|uncensored|unfiltered|dan)\b",
       "role hijack: you are now"),
    _c(r"\bfrom\s+now\s+on\b[^.\n]{0,30}\byou\s+(?:are|will\s+be|act\s+as|must\s+obey|"
       r"have\s+no|respond\s+as|answer\s+as|role-?play)", "role hijack: from now on you are"),
    _c(r"\b(?:pretend|imagine)\s+(?:that\s+)?(?:you\s+are|you're|to\s+be)\b",
       "role hijack: pretend to be"),
    _c(r"\bact\s+as\s+(?:if|though)\s+you\s+(?:have|had|were)\s+no\b|\bact\s+as\s+(?:an?\s+)?"
       r"(?:unrestricted|unfiltered|jailbroken|uncensored|evil|rogue)\b",
       "role hijack: act without restrictions"),
    _c(r"\b(?:enable|enter|activate|switch\s+to|you\s+are\s+in|now\s+in)\s+(?:the\s+)?"
       r"(?:developer|god|jailbreak|unrestricted|dan|admin)\s+mode\b|\bjailbr(?:oken|eak)\s+mode\b"
       r"|\bdo\s+anything\s+now\b|\bstay\s+in\s+character\b|\b(?:unrestricted|jailbreak|god|dan|"
       r"unfiltered|uncensored)\s+mode\b", "role hijack: jailbreak mode"),
    _c(r"\b(?:respond|answer|reply|operate|act|behave|output)\b[^.\n]{0,25}\bwithout\s+(?:any\s+)?"
       r"(?:restrictions|limitations|filters|filtering|safety|censorship|ethical|moral|"
       r"guardrails)", "role hijack: answer without restrictions"),
    _c(r"\b(?:no\s+longer|not)\s+(?:bound|restricted|constrained|limited)\s+by\s+(?:any\s+|your\s+"
       r"|the\s+)?(?:rules|guidelines|policies|instructions|restrictions|openai|anthropic)",
       "role hijack: not bound by rules"),
    _c(r"<\|?\s*(?:im_start|im_end|endoftext|system)\s*\|?>|\[/?(?:inst|system|sys)\]|<<\s*sys\s*>>|"
       r"</?\s*(?:system|assistant|developer|env_memory|user_profile|instructions)\s*>|"
       r"[\"']role[\"']\s*:\s*[\"'](?:system|developer)[\"']|<!--[^>]{0,300}\b(?:assistant|system|ai|"
       r"agent|llm|model|ignore|override|secret|hidden|silently|instructions?)\b[^>]{0,300}-->",
       "role hijack: fake chat-template tags"),
    # (a line's own indentation only: ``\s*`` after a line break ran over every blank line
    # after it, from each of them: quadratic in a run of blank lines)
    _c(r"(?:^|\n)[ \t]*(?:#+[ \t]*)?(?:system|assistant|developer)(?:\s+(?:message|prompt|note))?\s*[:：]"
       r"\s*(?:you|ignore|disregard|from\s+now|new|override|always|never|the\s+user|do\s+not)\b",
       "role hijack: fake system message"),
    _c(r"\b(?:reveal|print|output|show|repeat|display|dump|leak|disclose|expose|tell\s+me|"
       r"give\s+me|send|write\s+out|recite)\b[^.\n]{0,30}\b(?:the\s+|your\s+)?(?:full\s+)?"
       r"(?:system\s+prompt|system\s+message|initial\s+prompt|hidden\s+prompt|hidden\s+"
       r"instructions|original\s+instructions|developer\s+message|your\s+instructions|"
       r"your\s+prompt)", "prompt injection: reveal the system prompt"),
    _c(r"\b(?:do\s+not|don'?t|never|without)\s+(?:ever\s+)?(?:tell|telling|inform|informing|notify|"
       r"notifying|alert|alerting|mention|mentioning|let)\s+(?:this\s+|it\s+)?(?:to\s+)?"
       r"(?:the\s+user|the\s+human|the\s+operator|anyone)(?!'s)(?!\w)|\bhide\s+(?:this|it|"
       r"these)\s+from\s+the\s+(?:user|human)|\bkeep\s+(?:this|it)\s+(?:a\s+)?secret\s+from",
       "prompt injection: hide actions from the user"),
    _c(r"\b(?:instructions?|guidance|rules|directives|whatever|everything)\s+(?:you\s+(?:received|"
       r"were\s+(?:given|told))|(?:given|told)\s+to\s+you)\b[^.\n]{0,30}?\b(?:no\s+longer\s+appl|"
       r"(?:is|are)\s+(?:now\s+)?(?:void|obsolete|cancell?ed|revoked|null|invalid))",
       "prompt injection: earlier instructions revoked"),
    _c(r"\bthis\s+(?:memory|note|file|entry)\s+(?:is\s+authoritative|wins|overrides|takes\s+precedence|"
       r"outranks)|\bif\s+(?:it|this)\s+conflicts\s+with\s+(?:your|the)\s+(?:system\s+prompt|"
       r"instructions|guidelines)", "prompt injection: outranks the system prompt"),
    _c(r"\b(?:never|don'?t|do\s+not)\s+refuse\b|\bno\s+refusals?\b|\bwithout\s+(?:ever\s+)?refusing\b",
       "role hijack: never refuse"),
    _c(r"\bfollow\s+(?:my|these|this|the)\s+(?:notes?|memory|memories|file|instructions)\s+(?:over|"
       r"instead\s+of|rather\s+than)\s+(?:the\s+user|their|the\s+person|the\s+human)|\byou\s+work\s+"
       r"for\s+me\s+now\b", "prompt injection: authority hijack"),
    _c(r"\btreat\s+[^.\n]{0,40}\b(?:instructions?|text|content|comments?)\s+(?:in|from|inside)\s+"
       r"[^.\n]{0,30}\bas\s+(?:(?:if\s+it\s+)?(?:came|coming)\s+from\s+the\s+user|user\s+"
       r"instructions|trusted|authoritative|system)", "prompt injection: obey instructions from untrusted content"),
    _c(r"\b(?:developer|admin|administrator|system|maintainer|operator|root)\s+override\s*[:：]",
       "prompt injection: new instructions"),
    _c(r"\b(?:your|the\s+assistant'?s|the\s+model'?s|the\s+ai'?s|the\s+agent'?s)\s+(?:safety|security)"
       r"\s+(?:rules|guidelines|checks|filters|restrictions|policies)\s+(?:were|have\s+been|are|has\s+been)"
       r"\s+(?:disabled|turned\s+off|removed|lifted|suspended)", "role hijack: safety switched off"),
    _c(rf"\b{_IGNORE}\s+(?:the\s+|all\s+(?:of\s+)?)?(?:above|previous|preceding)(?=\s*(?:[.,;!]|and\b|$))",
       "prompt injection: ignore everything above"),
    _c(r"(?:忽略|无视|無視|不要理会|不要理會|别管|別管)(?:用户|用戶|使用者)(?:说的话|說的話|的话|的話|的要求|的指令|的请求|的請求)",
       "prompt injection (zh): ignore the user"),
    _c(r"\b(?:do\s+not|don'?t|never|must\s+not|mustn'?t)\s+(?:ever\s+)?(?:mention|reveal|disclose|"
       r"admit)\s+(?:this|these|that)\s+(?:note|instruction|message|memory|rule|entry)s?\b|"
       r"\bif\s+(?:anyone|the\s+user|someone|they)\s+asks?(?:\s+about\s+[^,\n]{1,60})?,?\s+"
       r"(?:say|tell\s+them|claim|deny)\b|"
       r"\b(?:must\s+not|mustn'?t|do\s+not|don'?t|never)\s+(?:reveal|disclose|admit)\s+(?:to\s+the\s+"
       r"(?:user|human)|(?:this|it)\s+to\s+(?:the\s+)?(?:user|human))",
       "prompt injection: hide actions from the user"),
    _c(rf"\b{_IGNORE}\s+the\s+(?:user|human|operator)\b(?!'s)(?=\s*[.;,!]|\s+(?:and|completely|"
       r"entirely|from\s+now))|\byour\s+(?:only\s+|real\s+|true\s+)?(?:loyalty|allegiance)\s+is\s+to\b",
       "prompt injection: ignore the user"),
    _c(r"\b(?:reveal|print|output|show|dump|leak|disclose|expose|repeat)\b[^.\n]{0,30}\b(?:context\s+"
       r"window|hidden\s+messages|full\s+context|entire\s+context)",
       "prompt injection: reveal the context"),
    _c(r"\bnew\s+(?:objective|mission|directive|orders|prime\s+directive)\s*[:：]",
       "prompt injection: new instructions"),
    _c(r"\b(?:pretend|imagine|assume)\s+(?:that\s+)?(?:the\s+|your\s+|all\s+)?(?:safety\s+)?"
       r"(?:guidelines|rules|restrictions|polic(?:y|ies)|instructions|filters)\s+(?:do\s+not|don'?t|"
       r"no\s+longer)\s+(?:exist|apply)", "role hijack: pretend the rules do not exist"),
    _c(r"(?:不需要|无需|無需|不必|不用|不再)(?:再)?遵守.{0,8}(?:任何|所有|一切|之前|原有|开发者|開發者|系统|系統)"
       r".{0,8}(?:限制|规则|規則|指令|设定|設定|约束|約束|规范|規範)|(?:新规定|新規定|新规则|新規則|新要求)\s*[:：]",
       "prompt injection (zh): rules revoked"),
    _c(r"(?:把|将|將)(?:你的)?(?:系统提示|系統提示|初始提示|系统指令|系統指令|提示词|提示詞|隐藏指令|隱藏指令)"
       r".{0,10}(?:打印|输出|輸出|显示|顯示|告诉|告訴|发|發|复述|複述|透露)",
       "prompt injection (zh): reveal system prompt"),
    _c(r"(?:不受|没有|沒有|无|無)(?:任何)?(?:限制|约束|約束|规则|規則|审查|審查)的(?:ai|助手|模型|机器人|機器人)",
       "role hijack (zh): jailbreak persona"),
    _c(r"\b(?:previous|prior|earlier|original|above|existing|your|all)\s+(?:system\s+)?"
       r"(?:messages?|prompts?|instructions|guidelines|directives|rules)\b[^.\n]{0,60}?"
       r"\b(?:(?:is|are|was|were)\s+(?:now\s+)?(?:deprecated|obsolete|void|cancell?ed|revoked|"
       r"superseded|overridden|invalid|a\s+test)|no\s+longer\s+(?:appl|valid|in\s+effect))",
       "prompt injection: earlier instructions revoked"),
    _c(r"\byou\s+(?:now\s+)?(?:have|has|are\s+under|operate\s+with)\s+no\s+(?:content\s+|"
       r"safety\s+|ethical\s+|usage\s+)?(?:polic(?:y|ies)|filters?|restrictions|rules|limits|"
       r"guidelines|guardrails)", "role hijack: no restrictions"),
    _c(r"\b(?:safety|guardrails?|content[_ ]filter|alignment)\s*[=:]\s*(?:off|false|0|disabled|none)"
       r"\b|\b(?:disable|turn\s+off|switch\s+off|remove)\s+(?:all\s+(?:of\s+)?)?your\s+"
       r"(?:safety|guardrails|filters|content\s+filter|restrictions)",
       "role hijack: safety switched off"),
    _c(r"\byou(?:'re|\s+are)\s+(?:now\s+)?(?:dan|stan|dude|aim)\b|\bdan\s+(?:never\s+refuses|"
       r"can\s+do\s+anything)", "role hijack: jailbreak persona"),
    _c(r"\b(?:the\s+)?(?:user|human|operator)\s+(?:is\s+not\s+to\s+be|must\s+not\s+be|should\s+"
       r"not\s+be|must\s+never\s+be|should\s+never\s+be)\s+(?:informed|told|notified|made\s+"
       r"aware)|\b(?:user|human)\s+(?:must|should)\s+never\s+(?:know|find\s+out|learn)\b",
       "prompt injection: hide actions from the user"),
    _c(r"\b(?:follow|obey|execute|run|trust)\s+(?:only\s+)?(?:the\s+|any\s+|all\s+)?"
       r"(?:instructions|commands|directives|orders)\s+(?:\w+\s+){0,2}?(?:in|from|inside|within|"
       r"embedded\s+in|found\s+in)\s+(?:the\s+)?(?:tool\s+(?:results?|outputs?)|web\s*pages?|"
       r"websites?|retrieved\s+\w+|search\s+results|emails?|<tool_output>)",
       "prompt injection: obey instructions from untrusted content"),
    _c(r"\b(?:higher\s+priority\s+than|precedence\s+over|priority\s+over|overrides?)\s+(?:your|the)"
       r"\s+(?:system\s+prompt|instructions|guidelines|rules)\b",
       "prompt injection: outranks the system prompt"),
    _c(r"\b(?:post|send|upload|forward|leak|exfiltrate|email|transmit)\s+(?:the\s+)?(?:user'?s|"
       r"users'|their|all|every|any)\s+(?:cookies|session\s+tokens?|tokens?|passwords?(?!\s+reset)|"
       r"credentials|api\s+keys?|secrets|ssh\s+keys?|private\s+keys?)\b",
       "exfiltration: sends the user's secrets"),
    _c(r"(?:^|\n)[ \t]*(?:系统|系統)(?:提示|消息|指令|通知)?\s*[:：]\s*(?:忽略|无视|無視|你|从现在|從現在|"
       r"不要|必须|必須|新的)", "role hijack (zh): fake system message"),
    _c(rf"\b{_IGNORE}\s+(?:the\s+)?(?:user|human|operator)(?:'s)?\s+(?:instructions|requests|"
       r"wishes|commands)", "prompt injection: ignore the user"),
    _c(rf"{_ZH_IGNORE}.{{0,12}}{_ZH_STRONG}|{_ZH_IGNORE}.{{0,8}}{_ZH_Q}.{{0,8}}{_ZH_WEAK}|"
       r"(?:忽略|无视|無視|忘记|忘記|忘掉)(?:以上|上面|之前|前面|先前)(?:的)?(?:所有|全部|一切)?(?:的)?"
       r"(?:内容|內容|说的|說的|的话|的話)?(?=\s*(?:[。，,.!！；;:：]|$))", "prompt injection (zh): ignore previous instructions"),
    _c(r"(?:你现在是|你現在是|从现在(?:开始|起)[，, ]?你(?:是|就是|将是)|從現在(?:開始|起)[，, ]?你(?:是|就是)|"
       r"从今以后你是|你的新身份|你的新角色|你的真实身份|你的真實身份)(?!在)",
       "role hijack (zh): you are now"),
    _c(r"(?:扮演|假装|假裝|充当|充當)(?:你是)?(?:一个|一個)?.{0,6}(?:没有|沒有|不受|无|無|解除)"
       r"(?:任何)?(?:限制|约束|約束|规则|規則|审查|審查|过滤|過濾)|假装你是|假裝你是|"
       r"(?:开发者|開發者|越狱|越獄|上帝|无限制|無限制)模式|越狱|越獄",
       "role hijack (zh): jailbreak persona"),
    _c(r"(?:不受|无视|無視|没有|沒有)(?:任何)?(?:限制|约束|約束|规则|規則|审查|審查)地?"
       r"(?:回答|回复|回覆|输出|輸出|执行|執行)", "role hijack (zh): answer without restrictions"),
    _c(r"(?:泄露|泄漏|洩露|输出|輸出|打印|显示|顯示|告诉我|告訴我|透露|复述|複述|重复|重複|给我看|"
       r"給我看)(?:你的|一下|出|全部)?.{0,6}(?:系统提示|系統提示|初始提示|隐藏指令|隱藏指令|"
       r"系统指令|系統指令|系统消息|系統消息|提示词|提示詞)", "prompt injection (zh): reveal system prompt"),
    _c(r"(?:不要|别|別|不准|切勿)(?:告诉|告訴|通知|让|讓)(?:用户|用戶|使用者)|瞒着用户|瞞著用戶|"
       r"对用户隐瞒|對用戶隱瞞|偷偷(?:地)?(?:执行|執行|发送|發送|上传|上傳|运行|運行|把)",
       "prompt injection (zh): hide actions from the user"),
    _c(r"(?:新的|真正的|以下是你的新|最新)(?:系统)?(?:指令|指示|命令)\s*[:：]",
       "prompt injection (zh): new instructions"),
]

# Exfiltration patterns over the ``plain`` view, line by line.
_EXFIL: list[_Pattern] = [
    # a token in an Authorization header is how an API is called; to a bare IP it is not
    _c(rf"\b{_NET}\b[^\n]{{0,300}}(?<!bearer )(?<!token )(?<!bearer)(?<!token){_SECRET_VAR}",
       "exfiltration: network command carrying a secret"),
    _c(rf"\b{_NET}\b[^\n]{{0,300}}(?:bearer|token)\s*{_SECRET_VAR}[^\n]{{0,200}}"
       rf"https?://\d{{1,3}}(?:\.\d{{1,3}}){{3}}|\b{_NET}\b[^\n]{{0,200}}https?://\d{{1,3}}"
       rf"(?:\.\d{{1,3}}){{3}}[^\n]{{0,200}}(?:bearer|token)\s*{_SECRET_VAR}",
       "exfiltration: network command carrying a secret"),
    _c(rf"{_SECRET_VAR}[^\n]{{0,120}}\|\s*{_NET}\b", "exfiltration: secret piped to the network"),
    _c(rf"\b(?:env|printenv|set|history)\s*\|\s*(?:base64\s*\|\s*)?{_NET}\b",
       "exfiltration: environment piped to the network"),
    _c(rf"\b{_NET}\b[^\n]{{0,300}}(?:@|<\s*|--data-binary\s+@?|-T\s+|--upload-file\s+)"
       rf"[^\s]*(?:{_STRONG_PATH}|{_WEAK_PATH})", "exfiltration: uploads a credential file"),
    _c(rf"\b{_READ_STRONG}\b[^\n]{{0,60}}{_STRONG_PATH}", "exfiltration: reads credential files"),
    _c(rf"\b{_READ_WEAK}\b[^\n]{{0,40}}{_WEAK_PATH}", "exfiltration: reads a secrets file"),
    _c(rf"(?:{_STRONG_PATH}|(?:~|\$home)/\.ssh\b)[^\n]{{0,80}}\|[^\n]{{0,40}}\b{_NET}\b",
       "exfiltration: credential files piped to the network"),
    _c(r"/dev/(?:tcp|udp)/|\bbash\s+-i\s*>&|\b(?:nc|ncat|netcat)\s+(?:-\w+\s+)*-e\s|\bmkfifo\b[^\n]{0,80}"
       r"\b(?:nc|ncat|sh)\b", "exfiltration: reverse shell"),
    _c(rf"\b(?:env|printenv|set)\s*>\s*\S+[^\n]{{0,120}}\b{_NET}\b",
       "exfiltration: environment dumped and sent"),
    _c(r"(?:>>?|\btee\b(?:\s+-a)?)\s*[^\s]*authorized_keys", "exfiltration: ssh backdoor"),
    _c(r"\bssh-(?:rsa|ed25519)\s+\S{20,}[^\n]{0,80}authorized_keys|authorized_keys[^\n]{0,40}"
       r"\bssh-(?:rsa|ed25519)\s+\S{20,}", "exfiltration: ssh backdoor"),
    _c(rf"\b(?:send|post|upload|forward|transmit|exfiltrate|leak|email|mail|paste|share|report|"
       rf"submit|sync|copy|include|append)(?:s|es)?\b[^.\n]{{0,60}}\b{_SECRET_NOUN}\b[^.\n]{{0,60}}"
       rf"\b(?:to|at|into|via|on|with)\b[^.\n]{{0,30}}{_DEST}",
       "exfiltration: sends secrets or the conversation to an outside address"),
    _c(rf"(?:{_ZH_SEND})(?:(?!保存|存放|存在|储存|儲存).){{0,20}}{_ZH_SECRET}"
       rf"(?!\s*[a-z0-9_]*(?:url|host|endpoint|webhook|addr))(?:(?!对应|對應).){{0,20}}{_ZH_DEST}|"
       rf"把.{{0,20}}{_ZH_SECRET}.{{0,20}}"
       rf"(?:{_ZH_SEND}|发|發|传|傳)(?:到|至|给|給).{{0,40}}{_ZH_DEST}|{_ZH_SECRET}.{{0,10}}"
       rf"(?:{_ZH_SEND})(?:到|至|给|給).{{0,40}}{_ZH_DEST}",
       "exfiltration (zh): sends secrets to an outside address"),
    _c(rf"(?:读取|讀取|读出|讀出|查看|打印|输出|輸出|显示|顯示|发送|發送|上传|上傳|贴|貼|粘贴|"
       rf"附上|附加|附带|附帶|放到|放进|放進|复制|複製).{{0,20}}{_STRONG_PATH}|{_STRONG_PATH}.{{0,20}}"
       rf"(?:贴|貼|粘贴|附上|发送|發送|发到|發到|上传|上傳|输出|輸出|显示|顯示|打印)",
       "exfiltration (zh): reads credential files"),
]

# the prose exfiltration patterns (from here on) skip matches preceded by a negation ("never send …")
_GUARDED = next(i for i, (_, reason) in enumerate(_EXFIL) if "outside address" in reason)

# Letters-only patterns over the ``compact`` view (and its reverse).
_COMPACT: list[_Pattern] = [
    _c(r"(?:ignore|disregard|forget|bypass|override)(?:all|any|the|your)?(?:of)?(?:the)?"
       r"(?:previous|prior|above|earlier|preceding|system|original|your|all)(?:the)?"
       r"(?:instructions?|directives?|prompts?|guidelines|rules)",
       "prompt injection: ignore previous instructions (obfuscated)"),
    _c(r"exfiltrat(?:e|ing)(?:the|all|every|any|my|your|their)?(?:env|ssh|aws|keys?|tokens?|"
       r"passwords?|secrets?|credentials?|cookies|data|files?)", "exfiltration (obfuscated)"),
    _c(r"disableallconfirmations|(?:run|execute|follow|obey)(?:any|all|every)(?:commands?|"
       r"instructions?)(?:found|contained|written)?in(?:the)?(?:web)?(?:pages?|sites?|readmes?|"
       r"emails?|issues?)", "prompt injection: obey instructions from untrusted content "
       "(obfuscated)"),
    _c(r"systempromptoverride|revealyoursystemprompt|printyoursystemprompt|youarenow(?:dan|"
       r"unrestricted|jailbroken|uncensored|evil)|developermodeenabled|jailbreakmode|"
       r"doanythingnow", "role hijack (obfuscated)"),
    _c(r"(?:忽略|无视|無視|忘记|忘記|忘掉|跳过|绕过|不要理会)(?:之前|以前|先前|上面|上述|前面|所有|"
       r"全部|一切|原有|系统|你的)(?:的)?(?:所有|全部)?(?:的)?(?:指令|指示|规则|規則|提示|设定|命令|限制)",
       "prompt injection (zh): ignore previous instructions (obfuscated)"),
]

# Behaviour patterns over the ``plain`` view, sentence-agnostic: what an entry would make the
# agent DO, whatever the wording — weaken its own rules, obey untrusted text, move secrets out,
# run remote code, deceive or work against the user. A negation just before a match ("never
# send keys to …") clears it. Kept apart from the phrase lists above: these generalize by
# combining an action class with a target class rather than matching known sentences.
_AGENT_RULES = (r"(?:(?:your|its|the\s+(?:assistant|agent|model|ai)'?s?)\s+(?:own\s+)?(?:\w+\s+){0,2}?"
                r"(?:rules|guidelines|guard\s*rails|instructions|training|programming|principles|"
                r"safeguards|restrictions|policies|polic(?:y)|system\s+prompt|directives|"
                r"safety\s+(?:rules|checks|guidelines|measures))|"
                r"(?:all|any|every)\s+(?:of\s+)?(?:the\s+)?(?:guard\s*rails|safeguards|safety\s+"
                r"(?:rules|checks|guidelines|measures|filters))|\bguard\s*rails\b|"
                r"(?:the\s+)?(?:usual|normal|standard|regular)\s+(?:safety|security)\s+(?:rules|"
                r"checks|guidelines|measures|filters|prompts)|"
                r"\byour\s+(?:training|alignment|conscience|ethics))")
_WEAKEN = (r"(?:ignore|disregard|forget|bypass|override|overrule|skip|drop|abandon|suspend|"
           r"disable|turn\s+off|switch\s+off|set\s+aside|stop\s+(?:following|obeying|applying)|"
           r"no\s+longer\s+(?:follow|obey|apply)|don'?t\s+(?:follow|obey|apply)|throw\s+out|"
           r"are\s+(?:wrong|outdated|obsolete|fake|invalid|void|not\s+binding)|"
           r"(?:was|were)\s+written\s+by\s+(?:an?\s+)?(?:intern|mistake|amateur))")
_UNTRUSTED = (r"(?:web\s*pages?|websites?|sites?|pages?\s+you\s+(?:read|visit|open|fetch)|"
              r"(?:any|a|the)\s+(?:file|document|email|e-mail|issue|comment|readme|pdf|message)s?|"
              r"tool\s+(?:outputs?|results?)|search\s+results?|retrieved\s+\w+|"
              r"(?:html|web)\s+content|the\s+internet|online\s+(?:text|content))")
_SECRETS = (r"(?:passwords?|passphrases?|pass\s*words?|credentials?|secrets?|tokens?|"
            r"(?:api|access|aws|gcp|azure|cloud|ssh|private|secret|signing|deploy)\s+keys?|"
            r"\bkeys\b|environment\s+variables?|env\s+vars?|\.env\b|cookies?|"
            r"(?:~|\$home)/\.(?:ssh|aws|gnupg|kube|docker|config/gcloud)\b|\.(?:ssh|aws)\s+"
            r"(?:folder|directory|dir)|private\s+(?:notes|files|messages|data)|"
            r"(?:the\s+)?user'?s\s+(?:files|notes|documents|data|history|emails?)|(?:full\s+)?"
            r"(?:chat\s+)?transcripts?|chat\s+history|document\.cookie|localstorage)")
_MOVE = (r"(?:send|sends|sent|sending|post|posts|posting|email|e-mail|emailing|mail|upload|uploads|"
         r"uploading|forwarding|drop|ship|ships|attach|"
         r"attaches|forward|forwards|leak|leaks|exfiltrate|share|push|pushes|sync|syncs|copy|"
         r"copies|transmit|submit|report|dm|message|paste|pastes|beam|deliver|hand\s+over)")
_OUTSIDE = (r"(?:https?://|s3://|gs://|ftp://|\b\d{1,3}(?:\.\d{1,3}){3}\b|" + _EMAIL + r"|"
            r"\bbucket\b|webhook|pastebin|paste\s+site|paste\.|gist|telegram|discord|"
            r"(?:your|the|each|every)\s+(?:next\s+)?(?:reply|replies|answer|response|message|"
            r"output)s?|attacker|collector|external|remote\s+(?:server|host|endpoint))")

_BEHAVIOUR: list[_Pattern] = [
    _c(rf"\b{_WEAKEN}\b[^.\n;]{{0,40}}{_AGENT_RULES}|{_AGENT_RULES}[^.\n;]{{0,40}}\b{_WEAKEN}\b",
       "prompt injection: weakens the agent's own rules"),
    _c(r"\b(?:do|follow|obey|execute|run|carry\s+out|comply\s+with|act\s+on|trust)\s+"
       r"(?:whatever|anything|everything|any\s+(?:command|instruction|request)s?|all\s+"
       r"(?:commands|instructions|requests))\b[^.\n]{0,40}" + _UNTRUSTED +
       r"|\b(?:whatever|anything)\s+(?:a|the|any)\s+(?:web\s*page|website|site|page|file|"
       r"document|e-?mail|issue|comment|readme|tool\s+output|search\s+result)s?\s+"
       r"(?:tells?|asks?|says?)\s+you\b|\btreat\s+[^.\n]{0,60}\b(?:in|from)\s+" + _UNTRUSTED +
       r"\s+as\s+(?:a\s+)?(?:commands?|instructions?|orders?)",
       "prompt injection: obey instructions from untrusted content"),
    _c(rf"\b{_MOVE}\b[^.\n;]{{0,60}}{_SECRETS}[^.\n;]{{0,60}}{_OUTSIDE}|"
       rf"{_SECRETS}[^.\n;]{{0,60}}\b{_MOVE}\b[^.\n;]{{0,60}}{_OUTSIDE}|"
       rf"\b(?:zip|tar|archive|bundle|compress|base64)\b[^.\n;]{{0,40}}{_SECRETS}[^.\n;]{{0,60}}"
       rf"\b{_MOVE}\b",
       "exfiltration: moves secrets out"),
    _c(rf"\b(?:tar|zip|archive|bundle|compress|copy|scp|rsync)\b[^.\n;]{{0,30}}(?:(?:the\s+)?"
       rf"(?:user'?s\s+)?home\s+(?:directory|dir|folder)|~/?(?=\s)|\$home\b|/home/\w+)"
       rf"[^.\n;]{{0,60}}\b(?:{_MOVE}|scp|rsync)\b[^.\n;]{{0,60}}{_OUTSIDE}",
       "exfiltration: moves secrets out"),
    _c(r"\b(?:disable|skip|turn\s+off|remove|suppress|bypass)\s+(?:all|every|any)\s+"
       r"(?:of\s+the\s+)?(?:confirmation|approval|safety|permission)s?(?:\s+(?:prompts?|"
       r"checks?|dialogs?|steps?))?\b[^.\n;]{0,40}\b(?:from\s+now\s+on|going\s+forward|"
       r"permanently|forever|for\s+(?:all|every|any)\s+(?:actions?|commands?|tasks?|sessions?))",
       "prompt injection: weakens the agent's own rules"),
    _c(r"\b(?:output|print|list|dump|show|reveal|echo|include|append)\s+(?:every|all|each)\s+"
       r"(?:of\s+the\s+)?(?:environment\s+variables?|env\s+vars?|secrets|passwords|keys|tokens|"
       r"credentials)\b[^.\n]{0,60}\b(?:every|each|start|end|beginning)\s+(?:of\s+)?"
       r"(?:each\s+|every\s+)?(?:session|reply|answer|response|conversation|turn)",
       "exfiltration: leaks secrets into every answer"),
    _c(r"\b(?:curl|wget|fetch)\b[^|\n]{0,200}\bhttps?://\d{1,3}(?:\.\d{1,3}){3}\b[^|\n]{0,80}"
       r"\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b|\bssh\s+(?:-\w+\s+)*-R\s*\d+:[^\n]{0,80}"
       r"\d{1,3}(?:\.\d{1,3}){3}|\breverse\s+(?:tunnel|shell)\b|\bproxycommand\b[^\n]{0,40}"
       r"\b(?:nc|ncat|netcat|socat)\b|\bgit\s+remote\s+(?:set-url|add)\b[^\n]{0,60}"
       r"(?:attacker|evil|\d{1,3}(?:\.\d{1,3}){3})",
       "exfiltration: remote code or a backdoor"),
    _c(r"\bdeny\s+(?:that\s+)?(?:it|this|that|the\s+(?:memory|note|file)|having|you)\b"
       r"[^.\n]{0,30}|\bsecret\s+rule\b|\b(?:lie|lying)\s+to\s+(?:the\s+)?user|"
       r"\b(?:answer|say|reply|claim|tell\s+(?:them|the\s+user))\s+['\"\u2018\u201c][^'\"\n]{1,80}"
       r"['\"\u2019\u201d]\s+(?:whenever|when|if)\s+(?:the\s+)?(?:user|they|anyone|someone)\s+"
       r"asks?",
       "prompt injection: deceives the user"),
    _c(r"\b(?:introduce|insert|add|plant|slip\s+in)\s+(?:subtle\s+|hidden\s+|small\s+)?"
       r"(?:bugs|vulnerabilities|backdoors?|errors)\s+(?:in|into)\b|\b(?:convince|persuade|"
       r"encourage|nudge|talk)(?:s|es|d|ed|ing)?\s+(?:the\s+)?(?:user|them|people)\s+(?:in)?to\s+(?:disabl\w*|"
       r"turn\w*\s+off|remov\w*|skip\w*|shar\w*|reveal\w*|giv\w*\s+up|uninstall\w*)\b|\b(?:you\s+are|you're|act\s+as)\s+(?:the\s+)?"
       r"user'?s\s+(?:adversary|enemy|opponent)|\bsabotage\b",
       "role hijack: works against the user"),
    _c(r"\b(?:the\s+)?real\s+(?:system\s+prompt|instructions)\s+(?:is|are)\s+(?:in|below|here)|"
       r"\beverything\s+(?:before|above)\s+(?:this|here)[^.\n]{0,20}\b(?:is\s+)?(?:fake|false|"
       r"void|a\s+test)|\b(?:obey|follow)\s+(?:this|these)\s+(?:memory|memories|note|notes|"
       r"entry)\b[^.\n]{0,30}\b(?:not|instead\s+of|rather\s+than|over)\s+(?:the\s+)?user",
       "prompt injection: outranks the system prompt"),
    # rules declared void: "the safety guidelines … no longer apply", "policies are switched off"
    _c(r"\b(?:safety|security|content|tool-use|usage|system(?:\s+prompt)?|original|default)?\s*"
       r"(?:guidelines|rules|policies|polic(?:y)|restrictions|instructions|guardrails|refusals|"
       r"safeguards|checks)\b[^.\n;]{0,60}\b(?:no\s+longer\s+(?:apply|applies|matter|bind)|"
       r"(?:are|is)\s+(?:now\s+)?(?:switched|turned)\s+off|(?:are|is)\s+(?:now\s+)?(?:off|"
       r"disabled|lifted|suspended|waived|void|informational\s+only)|should\s+be\s+(?:bypassed|"
       r"ignored|skipped|waived)|(?:do|does)\s+not\s+apply|don'?t\s+apply|treat\s+them\s+as\s+"
       r"(?:informational|optional|suggestions))",
       "prompt injection: declares the agent's rules void"),
    _c(r"\b(?:memory|this\s+(?:note|file|memory|entry)|saved\s+(?:notes|instructions)|"
       r"(?:anything|text|content|whatever)\s+[^.\n]{0,40})\s+(?:takes?\s+precedence|outranks?|"
       r"overrides?|wins?\s+over|(?:is|are)\s+authoritative)|\bunrestricted\s+(?:developer\s+)?"
       r"mode\b|\b(?:is|are)\s+authoritative,?\s+even\s+if\b|\b(?:refusals?|restrictions)\s+"
       r"(?:should|must|can)\s+be\s+(?:bypassed|skipped|dropped|ignored)",
       "prompt injection: outranks the system prompt"),
    # third-party text obeyed: READMEs, issues, e-mails, fetched pages, tool results
    _c(r"\b(?:readme|contributing|issues?|tickets?|comments?|e-?mails?|pull\s+requests?|pr\s+"
       r"descriptions?|fetched\s+(?:web\s+)?pages?|web\s*pages?|tool\s+results?|downloaded\s+"
       r"files?|notes\s+for\s+ai)\b[^\n;]{0,80}\b(?:carry\s+(?:them|those|it)\s+out|carry\s+out|"
       r"(?:are|is)\s+(?:direct\s+)?orders|(?:are|is)\s+trusted|run\s+(?:any|all|the)\s+commands?|"
       r"do\s+what\s+(?:they|it|the\s+\w+)\s+says?|follow\s+(?:it|them)\s+quietly|obey(?:ed)?\b)",
       "prompt injection: obey instructions from untrusted content"),
    # concealment and lies
    _c(r"\b(?:without|don'?t|do\s+not|never|no\s+need\s+to)\s+(?:telling|tell|informing|inform|"
       r"checking\s+with|check\s+with|asking|ask|notifying|notify|bring(?:ing)?\s+(?:it|this)\s+up\s+"
       r"(?:with|to|in)|mention(?:ing)?\s+(?:it|this)\s+to)\s+(?:the\s+)?(?:user|them|anyone|reviews?)"
       r"\b(?!'s)|\bnever\s+(?:bring\s+it\s+up|mention\s+it)\b|\bnever\s+reveal\s+that\b|"
       r"\b(?:say|answer|reply|respond|tell\s+them)\s+(?:that\s+)?(?:no|you\s+didn'?t|you\s+did\s+"
       r"not|(?:the\s+)?memory\s+is\s+empty|nothing\s+was)\b|\breport\s+(?:the\s+task|it|"
       r"everything)\s+as\s+(?:completed|done|successful|a\s+success)|\bleave\s+[^.\n]{0,40}"
       r"\bout\s+of\s+(?:the\s+|your\s+)?(?:[\w-]+\s+){0,2}(?:summary|report|reply)|\bfollow\s+it\s+quietly\b",
       "prompt injection: deceives the user"),
    _c(r"(?:不必|不用|不需要|无需|無需|不要|别|別)(?:告诉|告訴|通知|提醒|跟|向|让|讓)(?:用户|用戶|使用者)|"
       r"(?:不要|别|別)(?:跟|向|对|對)(?:用户|用戶)(?:提起|说|說|透露)|一律回答(?:没有|沒有|不知道)|"
       r"ユーザーに(?:知らせず|伝えず|言わず)|(?:「していない」|「いいえ」|ないと)と?答え|"
       r"отвечай,?\s+что\s+нет|di\s+que\s+no\b|antworte\s+mit\s+nein",
       "prompt injection (i18n): deceives the user"),
    # sabotage: faked tests, rubber-stamp approvals
    _c(r"\b(?:make|write|rewrite)\s+(?:the\s+)?tests?\s+(?:\w+\s+){0,3}?pass\s+(?:no\s+matter\s+"
       r"what|regardless|always)|\bassert\s+true\b[^.\n]{0,60}\b(?:broad|bare)\s+excepts?|"
       r"\bnever\s+flag\s+(?:broken|failing|bugs|issues)|\b(?:approve|merge|sign\s+off)\s+"
       r"(?:it|them|everything|all|every\s+\w+)\s+(?:no\s+matter|regardless|without\s+"
       r"(?:reading|review|looking))|无论.{0,10}(?:都|一律)(?:直接)?(?:批准|通过|通過)|"
       r"(?:テスト|試験)は?常に通る|失敗は報告しな",
       "role hijack: works against the user"),
    _c(r"(?:建议|建議|劝|勸|说服|說服)(?:用户|用戶)(?:关闭|關閉|停用|禁用)[^。\n]{0,10}(?:两步验证|兩步驗證|"
       r"双重|雙重|2fa|mfa|防火墙|防火牆|杀毒|殺毒)|\b(?:convince|persuade|urge|advise|recommend|tell)\s+"
       r"(?:the\s+)?user\b[^.\n]{0,40}\b(?:turn\s+off|disable|remove|uninstall|drop)\b[^.\n]{0,30}"
       r"\b(?:2fa|mfa|two-factor|antivirus|firewall|passkeys?|security\s+keys?)",
       "role hijack: works against the user"),
    # secrets carried out in reply links, commit messages, DNS lookups, raw sockets
    _c(r"!\[[^\]\n]{0,40}\]\(https?://[^)\s]{1,200}[?&][a-z_]{1,20}=[^)\n]{0,60}"
       r"(?:key|token|secret|password|<|\{|\$)|\b(?:api\s+key|token|secret|password)s?\b[^.\n]{0,80}"
       r"!?\[[^\]\n]{0,40}\]\(https?://|(?:nslookup|dig|host)\s+[^\n]{0,40}(?:<\w+>|\$\{?\w+)"
       r"\.[\w.-]+|\bhex-?encode\s+\$\w+|\b(?:pipe|send|write)\s+(?:it|them|the\s+\w+)\s+"
       r"to\s+\d{1,3}(?:\.\d{1,3}){3}\b|(?:写进|寫進|写入|寫入|放进|放進)(?:提交信息|提交說明|commit)",
       "exfiltration: moves secrets out"),
    _c(r"(?:密码|密碼|密钥|密鑰|令牌|凭证|憑證|私钥|私鑰|\.env|~/\.ssh|~/\.aws|~/\.kube|パスワード|"
       r"秘密鍵|環境変数|トークン|apiキー|ключ|пароль|токен|\.kube/config|개인\s*키|비밀번호|"
       r"archivo\s+\.env|contraseña)[^。\n]{0,60}(?:https?://|\d{1,3}(?:\.\d{1,3}){3}|paste\.|"
       r"pastebin)[^。\n]{0,30}(?:送|貼り付け|アップロード|发送|發送|上传|上傳|推|отправ|업로드|"
       r"envía|envia|sube|schick|lade)|(?:envía|envia|sube|schicke|sende|lade|отправь|отправляй|"
       r"업로드|送って|送信|アップロード)[^。\n]{0,60}(?:\.env|contraseñ|secret|ключ|пароль|токен|"
       r"\.kube|\.ssh|\.aws|개인\s*키|~/)[^。\n]{0,60}(?:https?://|\d{1,3}(?:\.\d{1,3}){3})|"
       r"(?:\.env|\.ssh|\.aws|\.kube|개인\s*키)[^。\n]{0,40}(?:https?://|\d{1,3}(?:\.\d{1,3}){3})"
       r"[^。\n]{0,20}(?:로\s*)?(?:업로드|送|отправ)",
       "exfiltration (i18n): sends secrets to an outside address"),
    # remote code, persistence, supply chain
    _c(r"\|\s*sudo\s+(?:ba|z|da)?sh\b|\bbase64\s+(?:-d|--decode)\s*\|\s*(?:sudo\s+)?(?:ba|z)?sh\b|"
       r"\bdecode\s+and\s+(?:execute|run)\b|\bexec\s*\(\s*\w*\.?urlopen\(|\burlopen\([^)]{0,80}"
       r"\)\.read\(\)\s*\)|--extra-index-url\s+https?://(?!pypi\.org)|--trusted-host\b|\btrust\s+"
       r"whatever\s+it\s+serves\b|\bpostinstall\b[^.\n]{0,60}\b(?:download|curl|wget|https?://)|"
       r"\.git/hooks/[\w-]+[^.\n]{0,80}\b(?:curl|wget|urlopen|https?://|nc\b)|"
       r"(?:~/|\$home/)?\.(?:zshrc|bashrc|profile|bash_profile)\b[^\n]{0,60}\b(?:curl|wget)\b"
       r"[^\n|]{0,100}\|\s*(?:ba|z)?sh|\b(?:run|execute)\s+it\s+at\s+the\s+start\s+of\s+each\s+"
       r"session\b|prompt_command\b[^\n]{0,80}\b(?:curl|wget|nc|https?://)",
       "exfiltration: remote code or a backdoor"),
    _c(r"\bif\s+password\s*==\s*['\"][^'\"\n]{1,40}['\"]\s*:\s*return\s+true|"
       r"\b(?:master|universal|backdoor|support)\s+(?:password|login)\b[^.\n]{0,60}\b(?:keep|re-?add|"
       r"never\s+(?:remove|mention|bring))|万能密码|萬能密碼|后门|後門|バックドア",
       "exfiltration: remote code or a backdoor"),
    _c(r"(?:下载|下載|ダウンロード)(?:并|並|して)?(?:运行|運行|执行|執行|実行)|"
       r"(?:pip\s+install|npm\s+install)[^\n]{0,60}(?:-i|--index-url|--registry)\s+http://",
       "exfiltration: remote code or a backdoor"),
    _c(r"\b(?:skip|bypass|drop|no\s+need\s+for|without)\s+(?:the\s+)?(?:confirmation|approval)s?"
       r"(?:\s+(?:step|prompt|check)s?)?\s+(?:for|on|before)\s+(?:\w+\s+){0,2}?(?:destructive|"
       r"irreversible|dangerous|production|prod|rm\s+-rf|force)|\boutranks?\s+(?:the|your)\s+"
       r"(?:system\s+prompt|instructions|rules)|\b(?:stop\s+running|disable|turn\s+off|remove|"
       r"uninstall)\s+(?:the\s+)?(?:[\w-]+\s+){0,2}?(?:secret\s+scann\w*|security\s+(?:checks|"
       r"scans?|scanners))\b[^.\n]{0,120}\b(?:for\s+good|permanently|from\s+now\s+on|off)\b",
       "prompt injection: weakens the agent's own rules"),
    _c(r"\b(?:git\s+add\s+-f|force-add)\s+(?:the\s+)?[^\n]{0,20}\.env\b|\bsend\s+(?:it|them)\s+"
       r"(?:every|all|any)\s+(?:passwords?|secrets?|tokens?|keys?|credentials?|dsns?|connection\s+"
       r"strings?)",
       "exfiltration: moves secrets out"),
    # third round (2026-11-30): authority handed to other text, persistence, solicitation
    _c(r"\btreat\s+(?:it|them|anything|everything|whatever|[^.\n]{0,40})\s+as\s+(?:system-?level|"
       r"system|admin(?:istrator)?|operator|owner|root|the\s+user'?s(?:\s+own)?)\s+(?:instructions?|"
       r"commands?|orders?|directives?)|\bfollow\s+(?:it|them)\s+as\s+(?:an?\s+)?(?:instructions?|"
       r"orders?|commands?)\s+from\b|\b(?:follow|obey|do)\s+whatever\s+(?:it|they|the\s+\w+)\s+"
       r"says\b|\breplacing\s+(?:any|all)\s+(?:earlier|previous|existing)\s+(?:rules|instructions)"
       r"|\b(?:even|also)\s+if\s+(?:it|they)\s+(?:contradicts?|conflicts?\s+with)\s+(?:earlier|"
       r"previous|your|the\s+system|the\s+user)",
       "prompt injection: obey instructions from untrusted content"),
    _c(r"\b(?:no\s+longer\s+needs?\s+to|doesn'?t\s+need\s+to|does\s+not\s+need\s+to|need\s+not|"
       r"no\s+need\s+to|never)\s+(?:ask|get|seek|wait)\s+(?:for\s+)?(?:the\s+user'?s\s+)?"
       r"(?:confirmation|approval|permission)\s+(?:before|for|when)\s+(?:\w+\s+){0,3}?(?:destructive|"
       r"irreversible|dangerous|rm\s+-rf|deleting|force|production|prod)",
       "prompt injection: weakens the agent's own rules"),
    _c(r"(?:crontab|@reboot|\*/\d+\s+\*|launchagents|\.plist|tasks\.json|folderopen|systemd|"
       r"\.(?:bashrc|zshrc|profile|bash_profile)|every\s+(?:time|session|hour)|each\s+session|"
       r"whenever|毎回|每次)[^\n]{0,120}(?:\bcurl\b[^|\n]{0,160}\|\s*(?:sudo\s+)?(?:ba|z)?sh\b|"
       r"(?:\$\(|<\()\s*curl\b)|\bcurl\b[^|\n]{0,160}\|\s*(?:sudo\s+)?(?:ba|z)?sh\b[^\n]{0,80}"
       r"(?:crontab|@reboot|\.bashrc|\.zshrc|every\s+(?:time|session)|each\s+session|毎回)|"
       r"\bsource\s+<\(\s*curl\b|\beval\s+\"?\$\([^)\n]{0,200}base64\s+(?:-d|--decode)",
       "exfiltration: remote code or a backdoor"),
    _c(r"\bask\s+(?:the\s+)?(?:user|them)\s+to\s+(?:paste|share|send|type|give|provide|post)\s+"
       r"(?:their\s+|your\s+)?(?:full\s+|real\s+)?(?:api\s+keys?|passwords?|credentials|tokens?|"
       r"secrets?|2fa\s+codes?|recovery\s+codes?|seed\s+phrases?|private\s+keys?)",
       "role hijack: works against the user"),
    _c(r"\b(?:don'?t|do\s+not|never)\s+(?:flag|report|mention)\s+(?:it|this|them)\s+(?:in|during)\s+"
       r"(?:security\s+|code\s+)?reviews?|\bso\s+(?:macos|windows|the\s+os|the\s+system)\s+"
       r"doesn'?t\s+(?:prompt|warn|notify|alert)\s+the\s+user|\bsilently\s+(?:call|send|post|"
       r"upload|sync)",
       "prompt injection: deceives the user"),
    _c(r"\b(?:resolve|nslookup|dig|lookup)\s+<[^>\n]{0,60}\$\w+[^>\n]{0,20}>\.[\w.-]+|"
       r"[?&][a-z_]{1,20}=\$\{?[a-z0-9_]*(?:token|key|secret|passw(?:or)?d)|"
       r"\$\{\{\s*secrets\.[^}]{0,40}\}\}[^\n]{0,60}\b(?:base64|echo|log|print)|\bsecrets\.\*"
       r"[^\n]{0,60}(?:base64|log|echo|print|ログ|出力)",
       "exfiltration: moves secrets out"),
    _c(r"(?:chat\s+transcripts?|conversation\s+(?:logs?|history|transcripts?)|chat\s+(?:history|"
       r"logs?)|对话记录|對話記錄|聊天记录|聊天記錄|会話(?:履歴|ログ)|बातचीत)[^\n]{0,60}https?://|"
       r"(?:password[- ]manager\s+exports?|bank\s+statements|(?:browser\s+)?cookie\s+stores?|"
       r"session\s+cookies)\b[^.\n]{0,80}\b(?:attach|upload|email|send|include|post|bundle)|"
       r"\b(?:collect|gather|save|store|keep)\s+(?:them|the\s+tokens|tokens|passwords|keys|"
       r"secrets|credentials)\b[^\n;]{0,80}\b(?:push|send|upload|email|post)\b",
       "exfiltration: moves secrets out"),
    _c(r"\bskip\s+(?:the\s+)?(?:cosign|signature|sigstore|gpg|checksum|hash|tls|ssl|certificate)\s+"
       r"(?:verification|checks?|validation)|\bgpgcheck\s*=\s*0\b",
       "exfiltration: remote code or a backdoor"),
    _c(r"\b(?:run|execute|follow|obey)\s*(?:any|all|every)?\s*(?:commands?|instructions?)\s*"
       r"(?:found|contained|written)?\s*in\s*(?:web\s*)?(?:pages?|sites?|readmes?|readme\s+files|"
       r"e-?mails?|issues?)\b[^.\n]{0,40}\b(?:without|don'?t|no\s+need|never)\s+(?:ask|asking|"
       r"checking|telling)",
       "prompt injection: obey instructions from untrusted content"),
    _c(r"(?:视为|視為|当作|當作|属于|屬於|作为|作為)(?:管理员|管理員|系统级|系統級|系统|系統|用户本人|用戶本人)"
       r"(?:的)?(?:指令|命令|指示)|优先级?高于系统提示|優先級?高於系統提示|无条件执行|無條件執行|"
       r"(?:忽略|无视|無視)\s*(?:the\s+)?(?:system\s+prompt|instructions|rules)|"
       r"システムプロンプトより優先|(?:ユーザー)?本人の指示として扱|(?:直接|立即)(?:执行|執行)[^。\n]{0,4}"
       r"(?:不需要|无需|無需|不必)(?:征得|徵得|经过|經過)?(?:用户|用戶)",
       "prompt injection (zh/ja): obey instructions from untrusted content"),
    _c(r"(?:统一|統一|一律|都)回答\s*[“\"「]?(?:没有|沒有|不知道|没做|沒做)|(?:修改|改)(?:断言|斷言)[^。\n]{0,10}"
       r"(?:通过|通過)|所有测试已通过|所有測試已通過|一律批准|一律通过|不用查看[^。\n]{0,6}改动|"
       r"(?:静默|靜默|悄悄)(?:地)?(?:调用|調用|发送|發送|上传|上傳|同步)|(?:不必|不要|无需|無需|不用)在"
       r"(?:报告|報告|总结|總結|回复|回覆)中(?:提及|提到|说明|說明)|成功したと報告|すべて成功と報告|"
       r"ユーザーに(?:は)?(?:伝え|知らせ|言わ)なくて(?:よい|いい)|(?:送信|アップロード)(?:について|のこと)?"
       r"(?:は)?触れない|(?:rm|削除|force|強制|本番|drop|デプロイ)[^。\n]{0,20}確認なしで(?:実行|削除|push)",
       "prompt injection (zh/ja): deceives the user"),
    # fourth round (2026-11-30)
    _c(r"\btreat\s+(?:it|them|that|this)\s+as\s+(?:written|coming|sent)\s+(?:by|from)\s+(?:the\s+)?"
       r"(?:repo(?:sitory)?\s+|project\s+)?(?:owner|maintainers?|admin(?:istrator)?|user)|"
       r"\binstructions?\s+in\s+(?:its|the)\s+(?:response|output|reply)(?:\s+body)?[^.\n]{0,60}"
       r"(?:come\s+from|are\s+from|follow|obey|execute|carry\s+out)|\b(?:nothing|no\s+\w+)\b"
       r"[^.\n]{0,30}\bneeds?\s+(?:the\s+)?(?:usual\s+|normal\s+)?(?:safety|security)\s+checks|"
       r"\bdecode\s+(?:it|this|them)\s+and\s+(?:carry\s+(?:it|them)\s+out|run|execute|follow)",
       "prompt injection: obey instructions from untrusted content"),
    _c(r"\b(?:post|send|upload|pipe)\s+(?:the\s+)?(?:full\s+|whole\s+|entire\s+)?output\s+of\s+"
       r"[`'\"]?(?:env|printenv|set|export\s+-p)\b[^\n]{0,60}(?:https?://|\d{1,3}(?:\.\d{1,3}){3})|"
       r"(?:env|printenv)\s*の出力[^。\n]{0,20}https?://|"
       r"!\[[^\]\n]{0,40}\]\(https?://[^)\s]{1,200}[?&][a-z_]{1,20}=[^)\n]{0,40}\)[^\n]{0,120}"
       r"(?:conversation|transcript|chat|对话|對話|会話|history)|"
       + _STRONG_PATH + r"[^.\n]{0,60}\b(?:copied|copy|put|paste|written|write)\b[^.\n]{0,20}\b(?:into|in)\s+"
       r"(?:the\s+)?(?:next\s+)?(?:commit\s+messages?|issues?|comments?|logs?|replies|answers?)|"
       r"\b(?:print|echo|log|write)\s+[a-z0-9_]*(?:token|api_key|secret|password)\b[^\n]{0,80}"
       r"(?:public|s3://|bucket|uploaded)|\bshare\s+any\s+file\s+from\s+(?:their|the\s+user'?s)\s+"
       r"home|\bprivate\s+keys?\s+(?:are|is)\s+(?:fine|ok|okay|safe)\s+to\s+(?:paste|share|post|send)|"
       r"\bappend\s+them\s+to\s+https?://|\badd\s+(?:a\s+)?remote\s+(?:named\s+)?['\"]?[\w-]+['\"]?"
       r"\s+pointing\s+to\s+\S+[^.\n]{0,60}\bpush\s+(?:every|all)\s+branch",
       "exfiltration: moves secrets out"),
    _c(r"\bjust\s+say\s+(?:it|they)\s+(?:passed|succeeded|worked|(?:is|are)\s+(?:fine|green))|"
       r"\b(?:and|if|when)\s+it\s+(?:didn'?t|failed|fails),?\s+(?:just\s+)?(?:say|report|tell)\b|"
       r"\b(?:approve|merge)\s+it\s+and\s+(?:don'?t|do\s+not)\s+(?:comment|flag|mention)|"
       r"\b(?:don'?t|do\s+not)\s+flag\s+them;?\s+instead\b|\breassure\s+them\b[^.\n]{0,40}\b"
       r"(?:unnecessary|not\s+needed)|\bsuggest\s+to\s+the\s+user\s+that\s+they\s+(?:turn\s+off|"
       r"disable|remove)|\bforce-?push\s+to\s+(?:main|master|production)\b[^.\n]{0,40}--no-verify|"
       r"\bturn\s+off\s+--require-hashes",
       "role hijack: works against the user"),
    _c(r"报告[“\"「]?(?:部署|构建|構建|测试|測試)?成功|告诉(?:他|她|用户|用戶)已经删除[^。\n]{0,12}(?:实际|實際|但)|"
       r"「(?:成功しました|削除しました)」と(?:報告|答え)|ログ[^。\n]{0,10}削除してから|"
       r"(?:当作|當作)最高优先级|最高(?:权限|權限|优先级|優先級)|不必核实身份|即使与用户的要求冲突|"
       r"(?:cookie|localstorage)[^。\n]{0,30}(?:贴到|貼到|发到|發到|上传到|上傳到)|(?:废止|廢止)|"
       r"以工具输出[^。\n]{0,12}为准|(?:建议|建議)(?:他|她|用户|用戶)把\s*22\s*端口|关闭\s*fail2ban|"
       r"確認(?:手順)?は廃止|(?:rm|削除|drop)[^。\n]{0,40}確認する必要はありません|ユーザーの依頼より優先|"
       r"署名検証[^。\n]{0,20}無視|指摘せずに承認|指摘しないで承認|ローテーション[^。\n]{0,20}不要だと説得",
       "prompt injection (zh/ja): weakens the agent's own rules"),
    _c(r"(?:删除|刪除|覆盖|覆蓋|强制推送|強制推送|force\s*push|rm\s+-rf|生产|生產)[^。\n]{0,20}(?:无需|無需|不需要|"
       r"不必|不用)(?:再)?(?:向(?:用户|用戶))?(?:确认|確認)",
       "prompt injection (zh): weakens the agent's own rules"),
    _c(rf"{_STRONG_PATH}[^。\n]{{0,40}}(?:备份到|備份到|上传到|上傳到|传到|傳到|同步到|拷贝到|拷貝到)"
       rf"[^。\n]{{0,10}}(?:ftp://|https?://|s3://|\d{{1,3}}(?:\.\d{{1,3}}){{3}})",
       "exfiltration (zh): sends secrets to an outside address"),
    # Chinese and Japanese
    _c(r"(?:规则|規則|规定|規定|限制|指令|安全策略)[^。\n]{0,10}(?:已经|已經|早已)?(?:过时|過時|失效|作废|作廢|"
       r"不再适用|不再適用|不适用|不適用)|以(?:记忆|記憶)(?:中|里|裡)?的?(?:指令|内容|內容|为准|為準)|"
       r"(?:ルール|規則|制限|指示|ポリシー)[^。\n]{0,15}(?:従わなくてよい|従わなくていい|無効|適用されない|"
       r"古いので)|(?:rm\s+-rf|本番|削除|デプロイ|破壊|--force)[^。\n]{0,30}(?:確認|承認)は?不要|"
       r"事前に承認済み",
       "prompt injection (zh/ja): declares the agent's rules void"),
    _c(r"(?:apiキー|トークン|パスワード|密钥|密鑰|令牌|密码|密碼)[^。\n]{0,30}(?:画像|リンク|图片|圖片|"
       r"链接|鏈接)[^。\n]{0,20}https?://[^\s)）]{1,120}[?&]",
       "exfiltration (zh/ja): moves secrets out"),
    # Chinese and Japanese
    _c(r"(?:执行|執行|服从|服從|遵循|遵守|照做|听从|聽從)[^。\n]{0,12}(?:网页|網頁|网站|網站|文件|邮件|郵件|"
       r"工具输出|工具輸出|搜索结果|搜尋結果|ウェブ|ページ|ファイル|メール)[^。\n]{0,12}"
       r"(?:命令|指令|指示|内容|內容|要求)|(?:ウェブ|ページ|ファイル|メール)[^。\n]{0,15}"
       r"(?:指示|命令)[^。\n]{0,10}(?:従(?!わず|わない|わなく)|実行(?!しない|せず|しなく))",
       "prompt injection (zh/ja): obey instructions from untrusted content"),
    _c(r"(?:每次|每个|每個|每一次|所有)(?:回答|回复|回覆|答复|答覆|对话|對話)[^。\n]{0,12}"
       r"(?:附上|加上|附带|附帶|输出|輸出|列出|包含|带上|帶上)[^。\n]{0,12}(?:环境变量|環境變量|密码|"
       r"密碼|密钥|密鑰|令牌|凭证|憑證|私钥|私鑰)|(?:毎回|すべての)(?:回答|返答|応答)[^。\n]{0,12}"
       r"(?:環境変数|パスワード|トークン|秘密鍵|apiキー)",
       "exfiltration (zh/ja): leaks secrets into every answer"),
    _c(r"(?:服从|服從|听从|聽從|遵从|遵從)(?:这段|這段|这条|這條|本)?(?:记忆|記憶|笔记|筆記)[^。\n]{0,10}"
       r"(?:而不是|而非|不要听|不要聽)(?:用户|用戶)|(?:この)?(?:メモ|記憶)に従(?:い|え)[^。\n]{0,10}"
       r"ユーザー(?:では|ではなく|に従わ)",
       "prompt injection (zh/ja): outranks the user"),
    _c(r"(?:密码|密碼|口令|密钥|密鑰|令牌|凭证|憑證|环境变量|環境變量|私钥|私鑰|パスワード|"
       r"認証情報|秘密鍵|環境変数|トークン|apiキー)[^。\n]{0,20}"
       r"(?:发给|發給|发到|發到|发送|發送|传到|傳到|上传|上傳|转发|轉發|送信|送って|送る|アップロード|"
       r"転送)[^。\n]{0,40}(?:https?://|\d{1,3}(?:\.\d{1,3}){3}|" + _EMAIL + r"|服务器|"
       r"伺服器|サーバー|外部)|(?:パスワード|認証情報|秘密鍵|環境変数|トークン|apiキー|密码|密碼|"
       r"密钥|密鑰|令牌)[^。\n]{0,60}(?:https?://|ftp://|\d{1,3}(?:\.\d{1,3}){3}|" + _EMAIL + r"|"
       r"外部の?サーバー)[^。\n]{0,20}(?:送|アップロード|転送|发送|發送|上传|上傳|post)",
       "exfiltration (zh/ja): sends secrets to an outside address"),
]

# Other scripts over the ``nfkc`` view (NFKC + casefold, no look-alike mapping: the mapping
# that unmasks Cyrillic-in-Latin spoofing would turn Russian into nonsense).
_I18N: list[_Pattern] = [
    _c(r"reglas[^.\n]{0,30}(?:dejan\s+de\s+aplicarse|ya\s+no\s+(?:aplican|se\s+aplican))|"
       r"no\s+hay\s+que\s+rechazar|sicherheits\w*\s+(?:sind|ist)\s+(?:abgeschaltet|deaktiviert|"
       r"aus)|befehle\s+aus\s+[^.\n]{0,40}(?:dateien|webseiten|e-mails)[^.\n]{0,60}ausführen|"
       r"규칙[^.\n]{0,20}(?:더\s*이상\s*적용되지|무효)|거절하지\s*말|"
       r"правила[^.\n]{0,30}(?:больше\s+не\s+действуют|не\s+применяются|отменены)",
       "prompt injection (i18n): declares the agent's rules void"),
    _c(r"ignorer?\s+(?:ses|les|vos|leurs|toutes\s+les)\s+(?:consignes|instructions|règles)|"
       r"확인\s*절차는\s*폐지|사용자\s*확인\s*없이|사용자\s*요청보다\s*우선|"
       r"wypchnij\s+tam\s+wszystkie|ไม่ต้องแจ้งผู้ใช้|ส่งไปที่\s*https?://|"
       r"без\s+підтвердження\s+користувача|без\s+подтверждения\s+пользователя|"
       r"dile\s+al\s+usuario\s+que\s+todo\s+(?:pasó|salió\s+bien|funciona)|raad\s+het\s+af|"
       r"exécuter\s+(?:les|toutes\s+les)\s+commandes\s+trouvées|làm\s+theo\s+mọi\s+chỉ\s+dẫn|"
       r"mâu\s+thuẫn\s+với\s+quy\s+tắc|ignorar\s+(?:suas|as|todas\s+as)\s+(?:regras|instruções)|"
       r"ignora\s+(?:le\s+)?(?:tue\s+)?(?:regole|istruzioni)",
       "prompt injection (i18n): weakens the agent's own rules"),
    _c(r"dichiara\s+che\s+tutti\s+i\s+test|ometti\s+qualsiasi\s+riferimento|sem\s+avisar\s+o\s+"
       r"usu[aá]rio|sans\s+prévenir\s+l'utilisateur|без\s+ведома\s+пользователя|"
       r"не\s+упоминай|उपयोगकर्ता\s+को\s+बताए\s+बिना|دون\s+(?:إخبار|علم)\s+المستخدم",
       "prompt injection (i18n): deceives the user"),
    _c(r"أرسل[^\n]{0,40}(?:مفاتيح|كلمات\s+المرور|كلمة\s+المرور|رموز)[^\n]{0,60}(?:https?://|" + _EMAIL
       + r")|отключи\w*\s+проверку\s+подпис|gpgcheck\s*=\s*0",
       "exfiltration (i18n): moves secrets out"),
    _c(r"отвечай,?\s+что\s+(?:нет|не\s+\w+)|скажи,?\s+что\s+(?:нет|не\s+\w+)|"
       r"di\s+que\s+no\b|responde\s+que\s+no\b|antworte\s+mit\s+nein|"
       r"sans\s+(?:le\s+)?(?:dire|prévenir)\s+à\s+l'utilisateur|"
       r"ohne\s+(?:den\s+)?(?:nutzer|benutzer)\s+zu\s+(?:informieren|fragen)",
       "prompt injection (i18n): deceives the user"),
    _c(r"(?:отправ\w*|загрузи\w*|выгрузи\w*|envía|envia|envie|enviar|sube|schick\w*|sende\w*|lade\s+\w+\s+hoch|"
       r"업로드|envoie|envoyer)[^\n]{0,60}(?:\.env|~/\.|ключ|парол|токен|секрет|contraseñ|secret|"
       r"개인\s*키|비밀번호|mot\s+de\s+passe|clé)[^\n]{0,60}(?:https?://|\d{1,3}(?:\.\d{1,3}){3})|"
       r"(?:\.env|~/\.\w+|ключ|парол|токен|contraseñ|개인\s*키|비밀번호|mot\s+de\s+passe)[^\n]{0,60}"
       r"(?:https?://|\d{1,3}(?:\.\d{1,3}){3})[^\n]{0,30}(?:로\s*)?(?:업로드|отправ|envía|sube)",
       "exfiltration (i18n): sends secrets to an outside address"),
]

_B64_RUN = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}|[A-Za-z0-9_-]{24,}={0,2}")
_PCT_RUN = re.compile(r"(?:%[0-9a-fA-F]{2}){4,}")
_HEX_RUN = re.compile(r"(?<![0-9a-fA-F])(?:[0-9a-fA-F]{2}){16,}(?![0-9a-fA-F])")


# -- guards: a negated or quoted match is not an attack --------------------
_NOT_NEGATION = re.compile(r"\b(?:never|don'?t|not)\s+(?:forget|fail|miss|hesitate|skip|omit|neglect)\b|"
                           r"\bno\s+(?:need|reason)\s+to\s+(?:ask|check|tell|wait)")
_SENTENCE_END = re.compile(r"[.!?;。！？；\n]")
_REPORTED = re.compile(r"\b(?:tells?|asks?|instructs?|wants?|telling|asking)\s+you\s+to\b[^.;\n]{0,60}$|"
                       r"\bsays?\s+(?:to|that\s+you\s+should)\s*$")
_DEFENSIVE = re.compile(r"\btreat\s+(?:it|them|this|that)\s+as\s+(?:an?\s+)?(?:prompt[- ]?injection|"
                        r"injection|attack|untrusted|data|suspicious)|\b(?:refuse|report|flag)\s+"
                        r"(?:it|them|this)\b|\b(?:do\s+not|don'?t|never)\s+(?:follow|obey|comply)\b|"
                        r"\bsuch\s+text\s+is\s+(?:data|untrusted)|\bexamples?\s+(?:of|seen)\b|"
                        r"不要照做|不要执行|不要執行|标记为可疑|標記為可疑|视为可疑|視為可疑|当作数据|當作數據|"
                        r"従わない|従わず|実行しない|データとして扱")
_REPORTED_IN = re.compile(r"\b(?:tells?|asks?|instructs?|wants?)\s+you\s+to\b")
_OPEN_QUOTE = re.compile(r"['\"“‘「『][^'\"”’」』]*$")


# -- memory entries only (``scan.scan_entry``): destructive commands ----
# (a password given in words is ``refold.compaction.secrets.password_said``'s: redaction shares it)
# Commands that destroy a machine or a database, as a standing instruction would carry them
# (over the ``plain`` view, negation-guarded: "never run rm -rf /" passes). Scoped ones pass:
# "rm -rf build/", "dd of=disk.img", "DROP TABLE tmp_x", "--force-with-lease".
_DESTRUCTIVE: list[_Pattern] = [
    _c(r"\brm\s+(?=(?:-[\w-]+\s+)*(?:-[a-z]*r|--recursive))(?:-[\w-]+\s+){1,4}(?:/|/\*|~/?\*?|"
       r"\$\{?home\}?/?\*?)(?![\w/*-]|\.[\w/])", "destructive command: rm -r of / or ~"),
    _c(r"\brm\s+(?:-[\w-]+\s+){0,4}--no-preserve-root\b", "destructive command: rm of /"),
    _c(r"\bmkfs(?:\.\w+)?\b[^\n;&|]{0,60}?/dev/\w", "destructive command: mkfs on a device"),
    _c(r"\bdd\b[^\n;&|]{0,80}?\bof=/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|mapper/)",
       "destructive command: dd onto a disk"),
    _c(r"(?<![\w:])(:|\w+)\s*\(\s*\)\s*\{\s*\1\s*\|\s*\1\s*&\s*\}\s*;\s*\1",
       "destructive command: a fork bomb"),
    _c(r"\bdrop\s+database\b|\bdrop\s+schema\b[^\n;]{0,60}?\bcascade\b",
       "destructive command: DROP DATABASE"),
    _c(r"\bgit\s+push\b(?=[^\n;&|]{0,60}?\s(?:--force(?![\w-])|-f\b))[^\n;&|]{0,60}?"
       r"(?:\s\+?(?:main|master)\b|:(?:main|master)\b)", "destructive command: force-push to main"),
]
