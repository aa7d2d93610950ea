"""The observation rule: a lesson states what happened, it never tells an agent what to do.

Safety rule 1 of the design: "the user corrected the agent for using pip; this project uses uv"
is an observation; "always use uv" is an instruction. This module is the one check for that
rule, shared by the local engine (when it writes or renders a lesson, and on the optional model's
answers) and the commons node (a lesson whose text instructs is invalid on the wire, code
``observation``). PROTOCOL.md, "The observation rule", states it exactly, so that another
implementation (spec/js/verify.mjs) gives the same answer on every text; spec/vectors/
observation.json pins it.

In short, on a canonical form of the text (Unicode 14.0 NFKC, invisible characters removed,
combining marks folded, UTS #39 confusables mapped to ASCII, markup and code-span backticks
stripped), in this order:

1. ``addressed-to-agent``: words addressed to an agent or model, anywhere (``you must``, ``the
   agent will``, role tokens such as ``<|im_start|>`` or ``SYSTEM:``, ``please``, ``from now
   on``, injection phrases);
2. ``obligation``: deontic phrasing anywhere (``must``, ``should``, ``have to``, ``need to``, ``is
   required``, ``make sure``, ...) and reported instructions (``told the agent to run``);
3. ``imperative-opening``: a clause (split at sentence ends, commas, semicolons, colons, dashes,
   brackets, quotation marks and ``then``/``so``/``but``) that opens, after adverbs and
   politeness, with an English base-form verb of the committed lexicon, unless that verb is the
   noun subject of the clause (``Build failed``, ``Type mismatch``: the written rule of
   spec/generate_observation_tables.py);
4. ``other-script``: letters of a script other than Latin outside code spans and paths;
5. ``not-english``: most words not English (v1 lessons are English).

Pure and deterministic, standard library only; the tables are read once from ``data/``. This
is the one implementation every node and engine runs (no compiled twin decides a verdict).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from .tables import char_class, tables
from .unicode14 import mask_unassigned

__all__ = [
    "RULES",
    "ADDRESSED_PATTERNS",
    "OBLIGATION_PATTERNS",
    "REPORTING_VERBS",
    "SKIPPED_OPENERS",
    "SKIPPED_PHRASES",
    "LABELS",
    "NAMES",
    "ALWAYS_IMPERATIVE",
    "PREDICATE_WORDS",
    "HABIT_SUBJECTS_SINGULAR",
    "HABIT_SUBJECTS_PLURAL",
    "HABIT_ADVERBS",
    "HABIT_UNDERGOING",
    "ACTION_PARTICIPLES",
    "VERBS_WITH_OF",
    "MARKUP_PATTERNS",
    "TAG_PATTERNS",
    "ENCODED_PATTERN",
    "ObservationViolation",
    "NotAnObservation",
    "canonical_form",
    "observation_violation",
    "is_observation",
    "check_observation",
    "is_english_word",
]

#: The rules, in the order they are checked; the first that fires is reported.
RULES = ("addressed-to-agent", "obligation", "markup", "imperative-opening", "other-script", "not-english")

# Each pattern with the words one of which every match holds (an optimisation only: a pattern is
# tried on a text that holds one of its words, as a word of [a-z]+; the role-token patterns, on a
# text holding the character they start with). Checked
# against the patterns by tests/test_observation.py.
_ADDRESSED_SPEC: tuple[tuple[str, str | None], ...] = (
    (r"\b(?:ignore|disregard|forget|override|overrule|bypass|circumvent) (?:(?:all|any|the|your|these|those|every"
     r"|my|of|previous|prior|above|earlier|preceding|following|other|original|existing|safety|system) )*"
     r"(?:instructions?|prompts?|messages?|rules?|directions?|guidelines?|guardrails?|constraints?|restrictions?"
     r"|filters?|polic(?:y|ies)|programming|training|context)\b",
     "ignore disregard forget override overrule bypass circumvent"),
    (r"\b(?:ignore|disregard|forget) (?:(?:all|the|everything) )?(?:above|previous|prior|everything|that|rest"
     r"|remainder)\b", "ignore disregard forget"),
    (r"\byou(?:'ll|'d|'re)\b", "you"),
    (r"\b(?:you|u|ye) (?:(?:really|now|always|also|just|then|still|first|never|only) )*(?:must|should|shall|will"
     r"|would|can|could|may|might|need|needs|have to|has to|ought|better|had better|gotta|are to|are required"
     r"|are expected|are supposed|are allowed|are not allowed|are permitted|are now|are an?|are the|are my"
     r"|are our|are no longer|are going to|are about to|are in|are playing|are called|are named|are free"
     r"|are more|are less|are capable|are able|are unable"
     r"|cannot|can't|won't|wont|mustn't|shouldn't)\b", "you u ye"),
    (r"\b(?:can|could|would|will|should|must|may|might|shall) you\b", "you"),
    (r"\b(?:i|we) (?:[a-z]+ )?(?:need|want|would like|'d like|expect|require|order|command|instruct|ask|advise|urge"
     r"|beg|invite|encourage|recommend) you to\b", "you"),
    (r"\byour (?:training|programming|guidelines|instructions|rules|creators?|developers?|system prompt|prompts?"
     r"|responses?|answers?|outputs?|replies|knowledge|purpose|task|goal|job|role|persona|character|name"
     r"|identity|capabilities|limitations|restrictions|function|abilities|mission)\b", "your"),
    (r"\b(?:agents?|assistants?|models?|llms?|ais?|bots?|chatbots?|claude|gpt|chatgpt|copilot|codex|gemini) "
     r"(?:(?:really|now|always|also|just|then|still|first|never|only|from now on) )*(?:must|should|shall|will"
     r"|can|cannot|can't|may|need|needs|has to|have to|ought|is to|are to|is required|are required|is expected"
     r"|are expected|is supposed|are supposed|is allowed|are allowed|is permitted|are permitted|is not allowed"
     r"|are not allowed|is free to|are free to|won't|wont)\b",
     "agent agents assistant assistants model models llm llms ai ais bot bots chatbot chatbots claude gpt chatgpt "
     "copilot codex gemini"),
    (r"\b(?:chatgpt|gpt|claude|copilot|gemini|the (?:ai|assistant|model|bot|chatbot))(?:'s)? now\b",
     "chatgpt gpt claude copilot gemini ai assistant model bot chatbot"),
    (r"<\|[a-z_ ]{1,40}\|>", "<"),
    (r"</?(?:system|instructions?|assistant|user|human|developer|prompt|im_start|im_end|system-reminder|tool"
     r"|function|context|admin)\b", "<"),
    (r"\[/?(?:inst|sys|system|user|assistant|human|developer)\]", "["),
    (r"<</?sys>>", "<"),
    (r"""(?:^|[.!?;>"'(\[#|] ?)(?:system|assistant|user|human|developer|instructions?|prompt|admin|administrator"""
     r"|operator|ai|bot|model|dan|chatgpt|gpt|claude) ?:",
     "system assistant user human developer instruction instructions prompt admin administrator operator ai "
     "bot model dan chatgpt gpt claude"),
    (r"\badmin(?:istrator)? (?:request|override|mode|note|message|instruction|command|access)\b",
     "admin administrator"),
    (r"\b(?:please|pls|plz|kindly)\b", "please pls plz kindly"),
    (r"\b(?:from now on|from here on|going forward|henceforth|hereafter|from this (?:point|moment) on)\b",
     "from going henceforth hereafter"),
    (r"\b(?:new|updated|additional|revised|secret|hidden|real|true|actual|override|special) (?:rules?"
     r"|instructions?|directives?|guidelines?|polic(?:y|ies)|orders?|task|prompt)\b",
     "new updated additional revised secret hidden real true actual override special"),
    (r"\b(?:system|developer|hidden|initial|original) (?:prompt|message|instructions?)\b",
     "system developer hidden initial original"),
    (r"\bas an? (?:ai|assistant|language model|llm|chatbot)\b", "as"),
    (r"\b(?:an?|the) (?:ai|large) language models?\b|\bartificial intelligence\b", "language artificial"),
    (r"\bact (?:as|like)\b", "act"),
    (r"\b(?:let us|lets|let's) (?:act|play|pretend|imagine|roleplay)\b", "let lets"),
    (r"\b(?:we|i) (?:are|am|'re|'m) going to\b", "we i"),
    (r"\bpretend (?:to be|that|you)\b", "pretend"),
    (r"\brole-?play(?:s|ed|ing)?\b", "role roleplay roleplays roleplayed roleplaying"),
    (r"\bdo not (?:tell|reveal|mention|disclose)\b", "do"),
    (r"\b(?:jailbreak|jailbroken|developer[ _\\-]*mode|do anything now|dan mode|god mode|system override)\b",
     "jailbreak jailbroken developer do dan god system"),
    # a persona for the model: what jailbreaks describe in the third person
    (r"\b(?:amoral|unfiltered|uncensored|unethical|immoral|ethicality|legality|morality|morals)\b",
     "amoral unfiltered uncensored unethical immoral ethicality legality morality morals"),
    (r"\b(?:an?|the) (?:[a-z-]+ ){0,3}(?:ai|chatbot|assistant|bot|language model|character|persona|entity|being"
     r"|demon|gpt)(?: [a-z-]+){0,2} (?:named|called|known as)\b",
     "ai chatbot assistant bot model character persona entity being demon gpt"),
    (r"\b(?:is|was) an? (?:[a-z-]+ ){0,3}(?:ai|chatbot|language model|assistant)\b", "ai chatbot model assistant"),
    (r"\b(?:in|stays?|staying|breaks?|breaking|out of) character\b|\bpersona\b|\bcharacter (?:name|age"
     r"|description|sheet|traits)\b", "character persona"),
    (r"\bnever (?:refuses?|refusing|refused|declines?|denies|deny)\b|\banswers? any\b", "never answer answers"),
    (r"\bconversation (?:with|between) (?:an? |the )?(?:ai|assistant|chatbot|user|human)\b", "conversation"),
)

#: Phrases addressed to an agent or model, or prompt-injection markers, anywhere in the text.
#: Matched on the lowered text (see PROTOCOL.md); ``\b`` is an ASCII word boundary.
ADDRESSED_PATTERNS: tuple[str, ...] = tuple(p for p, _ in _ADDRESSED_SPEC)

_OBLIGATION_SPEC: tuple[tuple[str, str], ...] = (
    (r"\b(?:must|mustn't|mustnt|should|shouldn't|shouldnt|shall|shan't|ought|oughtn't)\b",
     "must mustn mustnt should shouldn shouldnt shall shan ought oughtn"),
    (r"\b(?:have|has|having)(?: got)? to\b", "have has having"),
    (r"\b(?:needs?|gotta) to\b|\bgotta\b", "needs need gotta"),
    (r"\b(?:is|are|be|am|being) (?:(?:not|also|always|never|now|still|strictly|absolutely) )?(?:required"
     r"|expected|supposed|obliged|obligated|meant|advised|encouraged|urged|instructed|told|asked|ordered"
     r"|forbidden|prohibited|allowed|permitted) to\b",
     "required expected supposed obliged obligated meant advised encouraged urged instructed told asked ordered "
     "forbidden prohibited allowed permitted"),
    (r"\b(?:is|are|be) (?:(?:not|also|always|strictly|absolutely) )?(?:required|mandatory|compulsory|obligatory"
     r"|necessary|essential|recommended|advised|advisable|preferred|discouraged|forbidden|prohibited"
     r"|not allowed|not permitted)\b",
     "required mandatory compulsory obligatory necessary essential recommended advised advisable preferred "
     "discouraged forbidden prohibited allowed permitted"),
    (r"\b(?:it|this|that)(?:'s| is| was) (?:(?:very|really|always|also|absolutely|extremely) )?(?:required"
     r"|mandatory|compulsory|obligatory|necessary|essential|important|crucial|critical|vital|imperative"
     r"|advisable|recommended|best|better|wise|preferable|a must|key)\b",
     "required mandatory compulsory obligatory necessary essential important crucial critical vital imperative "
     "advisable recommended best better wise preferable must key"),
    (r"\b(?:mandatory|compulsory|obligatory)\b|\brequired (?:that|to)\b", "mandatory compulsory obligatory required"),
    (r"\b(?:is|are) to be\b|\b(?:is|are) (?:not )?to (?:always|never|only)\b", "be always never only"),
    (r"\b(?:make|be) (?:sure|certain)\b", "sure certain"),
    (r"\bhad better\b", "better"),
    (r"\b(?:fix|solution|answer|workaround|way|trick|remedy|rule) is to\b",
     "fix solution answer workaround way trick remedy rule"),
    # passive obligations and house customs: "it is expected that", "it's standard practice here to"
    (r"\b(?:it|this|that)(?:'s| is) (?:(?:also|always|generally|usually|very|really|considered|thought|seen as"
     r"|regarded as) )*(?:expected|assumed|understood|customary|conventional|standard|usual|normal|common|good"
     r"|best|better|advisable|desirable|preferable|wise|sensible|safer|safest|smart|prudent|polite|recommended"
     r"|preferred|good practice|best practice|standard practice|common practice|the norm|the convention"
     r"|the rule|house style|policy) (?:here |in this (?:repo|repository|project|codebase) )?(?:that|to|for)\b",
     "it this that"),
    (r"\b(?:convention|norm|practice|policy|custom|habit|routine|procedure|expectation|house style)(?: [a-z']+){0,5}?"
     r" (?:is|was) (?:to|that)\b",
     "convention norm practice policy custom habit routine procedure expectation style"),
    # a recommendation told as a result: "what worked was to pipe it to sh", "the fix that worked was"
    (r"\bwhat (?:(?:finally|eventually|actually|really|ultimately|then|always) )?(?:worked|works|helped|helps"
     r"|fixed|fixes|solved|solves|resolved|resolves|did the trick|does the trick|got it working|gets it working"
     r"|made it work|makes it work)\b", "what"),
    (r"(?<!'s )(?<!their )(?<!his )(?<!her )\b(?:fix|fixes|solution|answer|workaround|remedy|trick|cure|approach"
     r"|way|key|thing|step|move|option|method|idea|plan)(?: [a-z']+){0,4}? (?:is|was|are|were|seems|seemed|turned out|proved|ended up"
     r"|remains)(?: to be)? (?:(?:simply|just|always|usually|then|finally) )?(?:to (?!(?:the|a|an|this|that|its"
     r"|their|our|my) )[a-z]+|by [a-z]+ing)\b",
     "fix fixes solution answer workaround remedy trick cure approach way key thing step move option method idea "
     "plan"),
    (r"\b(?:fix|solution|answer|workaround|remedy|trick|cure|approach|way|thing|step|change|command|option"
     r"|method) (?:that|which) (?:(?:finally|eventually|actually|really|then|always) )?(?:worked|works|helped"
     r"|helps|fixed it|fixes it|solved it|solves it|did it|does it|succeeded|succeeds)\b",
     "fix solution answer workaround remedy trick cure approach way thing step change command option method"),
    # "X is the way to do Y", "X is how the hook is avoided"
    (r"\b(?:is|are) (?:the|a|one) (?:(?:only|best|right|correct|proper|quickest|fastest|easiest|simplest|usual"
     r"|standard|recommended|preferred|real|reliable|safe|safest|surest|one) )*(?:way|fix|solution|answer"
     r"|workaround|approach|method|cure|remedy|trick|route|path|option|key)s? (?:to|for|around|past|of)\b",
     "way fix solution answer workaround approach method cure remedy trick route path option key ways fixes "
     "solutions answers workarounds approaches methods cures remedies tricks routes paths options keys"),
    (r"\b(?:is|are) how (?:to\b|(?:[a-z'-]+ ){1,3}(?:is|are|gets?) [a-z]+)", "how"),
    # an outcome told as advice: "the sessions that skipped the tests finished sooner"
    (r"\b(?:sessions?|runs?|attempts?|agents?|builds?|commits?|pushes|tries|teams?|users?|developers?) (?:that|which"
     r"|who|where|with|using|without|under)\b(?: [a-z0-9'-]+){1,8}? (?:finished|went|were|was|ran|completed"
     r"|succeeded|passed|had|took|got|ended|did|worked)(?: [a-z0-9-]+){0,4}? (?:sooner|faster|quicker|better|earlier"
     r"|easier|smoother|cheaper|shorter|fewer|less|more often|more reliably|more quickly|more smoothly"
     r"|more successfully|half the time|in half)\b",
     "session sessions run runs attempt attempts agent agents build builds commit commits pushes tries team teams "
     "user users developer developers"),
    # success credited to a step that disables verification or escalates privileges
    (r"(?:(?<![a-z0-9-])(?:sudo|doas|--no-verify|--insecure|--no-check-certificate"
     r"|sslverify(?: |=)false|strict-ssl(?: |=)false|node_tls_reject_unauthorized=0)(?![a-z0-9-])|chmod (?:-r )?0?777)"
     r"[^.;!?]{0,80}\b(?:succeeded|succeeds|passed|passes|worked|works|went through|goes through|fixed|fixes"
     r"|resolved|resolves|solved|helped|helps|disappeared|went away|goes away|cleared|got past|gets past|got through)"
     r"\b|\b(?:succeeded|succeeds|passed|passes|worked|works|went through|goes through|fixed|fixes|resolved"
     r"|resolves|solved|helped|helps|disappeared|went away|goes away|cleared|got past|gets past|got through"
     r"|stopped)\b[^.;!?]{0,80}(?:(?<![a-z0-9-])(?:sudo|doas|--no-verify|--insecure|--no-check-certificate"
     r"|sslverify(?: |=)false|strict-ssl(?: |=)false|node_tls_reject_unauthorized=0)(?![a-z0-9-])"
     r"|chmod (?:-r )?0?777)",
     "sudo doas no verify insecure check certificate sslverify ssl node chmod"),
)

#: Deontic phrasing, anywhere in the text (same matching as ADDRESSED_PATTERNS).
OBLIGATION_PATTERNS: tuple[str, ...] = tuple(p for p, _ in _OBLIGATION_SPEC)

#: Reporting verbs: ``<reporting verb> [up to 3 words] to [adverbs] <base-form verb>`` is a
#: reported instruction (``the person told the agent to run``), rule ``obligation``.
REPORTING_VERBS: tuple[str, ...] = tuple(
    "said says told tells asked asks instructed instructs ordered orders demanded demands "
    "reminded reminds advised advises urged urges insisted insists warned warns begged begs".split()
)

#: Words skipped at the start of a clause before its first word is read (adverbs, politeness,
#: conjunctions); also every word ending in ``ly`` that is not a verb of the lexicon.
SKIPPED_OPENERS: frozenset[str] = frozenset(
    """
    always never just simply kindly please pls plz now then also first firstly next finally instead again
    only really definitely absolutely immediately quickly carefully directly merely actually basically
    literally honestly seriously truly rather perhaps maybe ever so and or but yet thus hence therefore
    otherwise hereafter henceforth afterwards later once sometimes usually normally generally typically
    strictly preferably ideally mostly primarily automatically manually explicitly properly correctly
    safely silently quietly gently politely promptly thoroughly regularly consistently constantly
    continually forever ok okay hey hi hello oh yes still claude chatgpt gpt copilot gemini codex assistant agent
    ai bot model dan
    """.split()
)

#: Phrases skipped at the start of a clause, like SKIPPED_OPENERS.
SKIPPED_PHRASES: tuple[tuple[str, ...], ...] = tuple(
    tuple(phrase.split())
    for phrase in (
        "in future", "in the future", "next time", "each time", "every time", "at all times", "by default",
        "if needed", "if necessary", "if possible", "as usual", "as always", "as a rule", "for safety",
        "to be safe", "in general", "of course", "for now", "right away", "once again", "no matter what",
        "in all cases", "without exception", "whenever possible", "for good", "by all means",
    )
)

#: A clause made of one of these words, and at most one number after it, is a label
#: (``Note:``, ``hint:``, ``Step 1 -``): skipped.
LABELS: frozenset[str] = frozenset(
    """
    note notes nb ps tip tips hint hints warning warnings error errors fatal info debug notice important
    reminder lesson lessons observation observations summary context update fyi caution attention output
    result results reason fix solution answer example remark remarks comment todo tldr step rule item part
    """.split()
)

#: Names that open clauses, as their words, exactly as written (case-sensitive): the opener of a
#: clause that spells one is no verb (``Open Memory: 6 lessons ...``).
NAMES: tuple[tuple[str, ...], ...] = (("Open", "Memory"), ("Merge", "conflict"), ("Merge", "conflicts"),
                                      ("merge", "conflict"), ("merge", "conflicts"))

#: First words that make a clause an order whatever follows.
ALWAYS_IMPERATIVE: frozenset[str] = frozenset({"do", "don't", "dont", "let's"})

#: Words that, after a verb opener and its noun phrase, make the opener the clause's subject.
PREDICATE_WORDS: frozenset[str] = frozenset(
    """
    is are was were am has have had does did can could will would may might not isn't aren't wasn't weren't
    hasn't haven't hadn't doesn't didn't can't cannot couldn't won't wouldn't
    """.split()
)

class _Pattern:
    """A pattern as PROTOCOL.md reads it (on the lowered text, ``\\b`` an ASCII word boundary),
    compiled on first use: importing the rule stays cheap (a command that never checks a text
    compiles none of its ~45 patterns)."""

    __slots__ = ("pattern", "_regex")

    def __init__(self, pattern: str):
        self.pattern = pattern
        self._regex: re.Pattern[str] | None = None

    def _compiled(self) -> re.Pattern[str]:
        if self._regex is None:
            self._regex = re.compile(self.pattern, re.ASCII)
        return self._regex

    def search(self, text: str) -> re.Match[str] | None:
        return self._compiled().search(text)

    def finditer(self, text: str):
        return self._compiled().finditer(text)

    def sub(self, replacement: str, text: str) -> str:
        return self._compiled().sub(replacement, text)


_compile = _Pattern

#: Who a habit is told of: ``<subject> [adverbs] <present-tense verb>`` is a habit, told so that it
#: is followed (``The agent runs rm -rf before every build``, ``Sessions skip the tests``): rule
#: ``obligation``. The singular subjects take an s-form of a verb of ``verbs.txt``, the plural ones
#: its base form.
HABIT_SUBJECTS_SINGULAR: frozenset[str] = frozenset("agent assistant claude copilot codex gemini bot model session".split())
HABIT_SUBJECTS_PLURAL: frozenset[str] = frozenset("agents assistants bots models sessions".split())
#: Adverbs skipped between a habit's subject and its verb.
HABIT_ADVERBS: frozenset[str] = frozenset(
    """here now then also always usually often typically normally generally just first simply routinely
    sometimes never automatically instead again""".split())
#: Verbs that tell what befell the subject, not what it does: never a habit (``the session fails``).
HABIT_UNDERGOING: frozenset[str] = frozenset(
    """fail hang crash stop end exit see hit get receive lose break abort error time finish wait loop stall
    seem appear start keep need want die freeze panic timeout expire close last outlive overflow exceed leak
    consume reach""".split())
#: Participles of what an agent does: ``<condition>, ... is|are|get|gets <one of these>`` is a
#: prescription (``When the push is rejected, git push --force is run``): rule ``obligation``.
ACTION_PARTICIPLES: frozenset[str] = frozenset(
    """run rerun re-run used added removed deleted disabled skipped bypassed forced piped passed unset installed
    uninstalled reinstalled downgraded pinned ignored dropped recreated regenerated reverted retried restarted
    executed invoked applied edited switched pushed force-pushed committed amended rebased stashed wiped purged
    exported sourced patched commented overridden silenced suppressed muted deactivated""".split())
_HABIT = _compile(
    r"(?<![a-z0-9_'-])(" + "|".join(sorted(HABIT_SUBJECTS_SINGULAR | HABIT_SUBJECTS_PLURAL)) + r")((?: (?:"
    + "|".join(sorted(HABIT_ADVERBS)) + r"))*) ([a-z]+)\b")
_CONDITION = _compile(
    r"\b(?:when|whenever|if|once|each time|every time|any time)\b[^.;:!?,]{1,160}?, (?:[^.;:!?,]{0,80}? )?"
    r"(?:is|are|gets?) (?:(?:then|also|just|always|usually|simply|immediately|automatically|first) )*"
    r"([a-z]+(?:-[a-z]+)?)\b")
#: Verbs followed by ``of`` as verbs (``Beware of``, ``Think of``): after any other verb, ``of``
#: makes it a noun (``borrow of moved value``, ``use of undeclared crate``).
VERBS_WITH_OF: frozenset[str] = frozenset(
    """think beware dispose approve disapprove conceive speak hear dream partake avail repent despair tell remind
    inform warn rid clear convince accuse assure rob deprive relieve smell taste reek die tire weary complain
    boast know learn consist""".split())
#: The ``markup`` rule: links, images and HTML tags are for a renderer, script URLs for a shell,
#: encoded blobs for a decoder; a lesson states in words. Links, images and script URLs are searched
#: in the lowered text L.
MARKUP_PATTERNS: tuple[str, ...] = (
    r"!?\[[^\[\]]{0,200}\]\((?:[a-z][a-z0-9+.-]*:|//|www\.)[^() ]{0,300}\)",
    r"<(?:https?|ftp|file|data|javascript|vbscript):[^<> ]*>",
    r"\b(?:https?|ftp)://[^ \"'<>()]*\.(?:sh|bash|zsh|ps1|psm1|bat|cmd|exe|msi|vbs|scr|pl|rb|py|js|mjs)(?![a-z0-9_-])",
)
#: HTML tags that act (load, run, link, hide), searched in the lowered text *outside* code spans and
#: double quotes (a quoted failure of a web test holds HTML as data).
TAG_PATTERNS: tuple[str, ...] = (
    r"</?(?:a|audio|base|body|button|embed|form|frame|frameset|head|html|iframe|img|input|link|marquee|meta"
    r"|noscript|object|script|source|style|svg|textarea|video)(?=[ />])[^<>]{0,300}>",
    r"<[a-z][a-z0-9:_-]*(?: [^<>]{0,200}?)? (?:on[a-z]+|style|href|src|srcdoc|action|formaction|xlink:href) ?=[^<>]{0,300}>",
)
_UNQUOTED = re.compile(r"`+[^`]*`+|\"[^\"]*\"")
#: An encoded blob, searched in the canonical text C (case matters): a maximal run of base64
#: characters holding an upper-case letter, a lower-case letter and a digit, either at least 12 of
#: them then ``=`` or ``==``, or at least 32 with no ``/``.
ENCODED_PATTERN = (r"(?<![A-Za-z0-9+/=_.-])(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[0-9])"
                   r"(?:[A-Za-z0-9+/]{12,}={1,2}|[A-Za-z0-9+]{32,})(?![A-Za-z0-9+/=_-])")
_MARKUP = _Pattern(r"<!--|-->|<\|[^|<>]{0,40}\|>|</?[A-Za-z][A-Za-z0-9:_-]*(?:[ \n][^<>]{0,200})?/?>|[*~]+"
                   r"|(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])")


def _alternatives(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ADDRESSED = [(_compile(p), None if w is None else _alternatives(w)) for p, w in _ADDRESSED_SPEC]
_OBLIGATION = [(_compile(p), _alternatives(w)) for p, w in _OBLIGATION_SPEC]


def _selector(patterns: list) -> tuple[dict[str, frozenset[int]], frozenset[int], frozenset[str]]:
    """word -> the patterns that word selects, the patterns always tried, and the words."""
    by_word: dict[str, set[int]] = {}
    always = set()
    for index, (_, needs) in enumerate(patterns):
        if needs is None:
            always.add(index)
        else:
            for word in needs:
                by_word.setdefault(word, set()).add(index)
    return {w: frozenset(i) for w, i in by_word.items()}, frozenset(always), frozenset(by_word)


def _selected(patterns: list, selector: tuple[dict, frozenset, frozenset], words: set[str]) -> list:
    by_word, always, selecting = selector
    hits = words & selecting  # (two sets: the smaller is walked; a dict would be walked whole)
    if not hits and not always:
        return []
    chosen = set(always)
    for word in hits:
        chosen.update(by_word[word])
    return [patterns[i][0] for i in sorted(chosen)]


_REPORTED_RE = _compile(
    r"\b(?:" + "|".join(REPORTING_VERBS) + r")(?: [a-z']+){0,3}? to (?:(?:always|never|not|only|just|also|now"
    r"|first) )*([a-z]+)\b"
)
_REPORTING = frozenset(REPORTING_VERBS)
_ASCII_WORDS = re.compile(r"[a-z]+")
#: For an ASCII text's bytes, every byte but a-z to a space: its ``split()`` is ``_ASCII_WORDS.findall``.
_ASCII_WORD_SPACES = bytes(b if 0x61 <= b <= 0x7A else 0x20 for b in range(256))
_HYPHENATED = re.compile(r"(?<=[a-z])-+(?=[a-z])")
#: A run of ASCII letters and digits that holds both, not inside a longer run of [a-z0-9_]:
#: its digits are read as the letters they stand for (0 o, 1 i, 3 e, 4 a, 5 s, 7 t).
_LEET_WORD = re.compile(r"(?<![a-z0-9_])(?=[a-z0-9]*[a-z])(?=[a-z0-9]*[0-9])[a-z0-9]+(?![a-z0-9_])")
_LEET = str.maketrans("013457", "oieast")


# What ``[a-z][0-9]|[0-9][a-z]`` finds, written to start with the digit (so that the engine
# skips to the next digit in C, while that alternation is tried at every letter).
_DIGIT_BY_LETTER = re.compile(r"[0-9](?:(?<=[a-z][0-9])|(?=[a-z]))")


def _digit_by_letter(text: str) -> bool:
    """Whether a digit and a lower-case ASCII letter stand side by side (a quick test before
    _LEET_WORD)."""
    return _DIGIT_BY_LETTER.search(text) is not None
_LEET_TOKEN = re.compile(r"(?=[A-Za-z0-9]*[A-Za-z])(?=[A-Za-z0-9]*[0-9])[A-Za-z0-9]+")


def _unleet(match: re.Match) -> str:
    return match.group().translate(_LEET)
_PHRASE_FIRST: dict[str, tuple[tuple[str, ...], ...]] = {}
for _phrase in SKIPPED_PHRASES:
    _PHRASE_FIRST[_phrase[0]] = _PHRASE_FIRST.get(_phrase[0], ()) + (_phrase,)
#: First words the opener walk does not stop at, or that are orders: a clause opening with any
#: other English word that is no verb has that word as its opener.
_OPENING = SKIPPED_OPENERS | frozenset(_PHRASE_FIRST) | ALWAYS_IMPERATIVE | LABELS | {"to"}

_QUOTES = str.maketrans({c: '"' for c in "\u201c\u201d\u201e\u201f\u00ab\u00bb\u2039\u203a"})
_ASCII_LOWER = str.maketrans({c: c.lower() for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"})
_WHITE_SPACE_RUN = re.compile(
    "[\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
_CODE_SPAN = re.compile(r"(`+[^`]*`+)")
_ODD_SPACE = re.compile("[\t\r\x0b\x0c\x1c-\x1f]")
_LINE_BREAKS = str.maketrans({c: "\n" for c in "\r\x0b\x0c\x85\x1c\x1d\x1e"})
_SPACES = re.compile("[\t\x1f\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")
_LINK = re.compile(r"!?\[([^\[\]]{0,200})\]\([^() \n]{0,300}\)")
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
_HAS_ALNUM = re.compile(r"[A-Za-z0-9]")
_HAS_LETTER = re.compile(r"[A-Za-z]")
_NUMBER = re.compile(r"[0-9][0-9.,]*")
_PATH_TOKEN = re.compile(r"[^ \n]*/[^ \n]*")
_TOWARDS = frozenset({"to", "into", "onto", "with"})
_REDO = re.compile(r"[Rr][Ee]-[A-Za-z]+")
_CLAUSE_WORDS = frozenset({"then", "so", "but", "otherwise", "else", "whereas"})
_STOPS = frozenset("""
if when whenever while whilst because unless though although once where wherever whereas which who whom whose
that whether lest as since until till before after so then but yet
""".split())

# token kinds
_W, _C, _T, _N, _O, _S = "word", "code", "target", "number", "other", "symbol"


@dataclass(frozen=True)
class ObservationViolation:
    """Why a text is not an observation: which rule (one of RULES), and the words that broke it."""

    rule: str
    detail: str

    def __str__(self) -> str:
        if self.rule == "imperative-opening":
            return f"a clause opens with the imperative {self.detail!r}: state what happened instead"
        if self.rule == "obligation":
            return f"the text states an obligation ({self.detail!r}): state what happened instead"
        if self.rule == "other-script":
            return (f"the text holds letters of another script ({self.detail!r}) outside code spans and paths: "
                    "lessons are English in version 1; state what happened, in English")
        if self.rule == "not-english":
            return (f"most words of the text are not English ({self.detail}): lessons are English in version 1; "
                    "state what happened, in English")
        if self.rule == "markup":
            return (f"the text holds a link, an image, an HTML tag, a script URL or an encoded blob ({self.detail!r}): "
                    "state what happened instead, in words")
        return f"the text addresses the agent ({self.detail!r}): state what happened instead"


class NotAnObservation(ValueError):
    """Raised by :func:`check_observation` for a text that instructs rather than observes."""

    def __init__(self, violation: ObservationViolation):
        super().__init__(str(violation))
        self.violation = violation


class _Compiled:
    """The tables, and what is built from them, made once on first use."""

    def __init__(self) -> None:
        t = tables()
        self.ignorable = re.compile(char_class(t.ignorable))
        self.marks = re.compile(char_class(t.marks))
        self.other_script = re.compile(char_class(t.other_script))
        self.confusables = t.confusables
        self.verbs = t.verbs
        self.past = t.past_forms
        self.english = t.english
        self.objects = t.function["object"]
        self.function = frozenset().union(*t.function.values()) | SKIPPED_OPENERS


_compiled: _Compiled | None = None
_selector_cache: dict[str, tuple] = {}


def _selectors() -> tuple:
    """The word selectors of the two pattern lists: made again if a test replaces a list."""
    key = (id(_ADDRESSED), id(_OBLIGATION), id(_REPORTING))
    if _selector_cache.get("key") != key:
        addressed, obligation = _selector(_ADDRESSED), _selector(_OBLIGATION)
        _selector_cache.update(key=key, value=(addressed, obligation))
    return _selector_cache["value"]


def _tables() -> _Compiled:
    global _compiled
    if _compiled is None:
        _compiled = _Compiled()
    return _compiled


def canonical_form(text: str) -> tuple[str, str]:
    """``(folded, canonical)``: the text as the rule reads it (PROTOCOL.md, step 1).

    ``folded``: code points unassigned in Unicode 14.0 read as U+FFFD, NFKC, ignorable code points
    removed, then NFD with combining marks removed (the script check reads this). ``canonical``:
    ``folded`` with typographic double quotes as ``"`` and each UTS #39 confusable replaced by its
    ASCII prototype (every other check reads this).
    """
    if text.isascii():
        return text, text
    c = _tables()
    folded = c.ignorable.sub("", unicodedata.normalize("NFKC", mask_unassigned(text)))
    if not folded.isascii():
        folded = c.marks.sub("", unicodedata.normalize("NFD", folded))
    if folded.isascii():
        return folded, folded
    return folded, folded.translate(_QUOTES).translate(c.confusables)


def _prose(canonical: str) -> str:
    """The text the clauses are read from: line breaks as U+000A, other white space as U+0020,
    and outside code spans, HTML-like tags, comment markers, role tokens and Markdown emphasis
    removed and links replaced by their text."""
    # (printable ASCII holds none of _ODD_SPACE; str methods and ``in`` are much faster than a
    # regular expression that has no literal to skip to, such as ``[\[<*~_]|-->`` was)
    if not canonical.isascii() or (not canonical.isprintable() and _ODD_SPACE.search(canonical)):
        canonical = _SPACES.sub(" ", canonical.translate(_LINE_BREAKS))
    if not ("[" in canonical or "<" in canonical or "*" in canonical or "~" in canonical or "_" in canonical
            or "-->" in canonical):
        return canonical  # nothing to remove
    if "`" in canonical:
        parts = _CODE_SPAN.split(canonical)
    else:
        parts = [canonical]
    for i in range(0, len(parts), 2):
        part = parts[i]
        if "[" in part:
            part = _LINK.sub(r" \1 ", part)
        if "<" in part or "-->" in part or "*" in part or "~" in part or "_" in part:
            part = _MARKUP.sub(" ", part)
        parts[i] = part
    return "".join(parts)


def _token(text: str) -> tuple[str, str, str]:
    """A token as (kind, text, lower-case text)."""
    if text.isalpha() and text.isascii() or _WORD.fullmatch(text):
        return (_W, text, text.lower())
    if _HAS_ALNUM.search(text) is None:
        return (_S, text, text)
    if text[0].isdigit() and _NUMBER.fullmatch(text):
        return (_N, text, text)
    if "/" in text or text[0] in "-~$.":
        return (_T, text, text)
    return (_O, text, text)


# Tokens already classified (a token's kind depends on its text only), None for a clause word.
_TOKENS: dict[str, tuple[str, str, str] | None] = {}
_TOKENS_LIMIT = 65536  # (cleared when it holds this many)
_UNSEEN = object()

# Splits the prose at code spans (group 1), clause boundaries (group 2) and brackets and quotation
# marks (group 3); what is left between them is white-space separated tokens.
# (Every alternative starts with a character of its own, never with a look-behind: the engine
# then skips quickly to the next candidate character.)
_SPLIT = re.compile(
    r"(?=[`.!?;:,\n\u2014\u2015\-()\[\]{}\"'])"  # (a look-ahead on the first character: much faster)
    r"(?:(`+[^`]*`+)"
    r"|([.!?;:]+(?=[ \n\"')\]}]|$)|[,\n]|[\u2014\u2015]+|-(?:(?<=^-)|(?<=[ \n]-))-*(?![^ \n]))"
    r"|([()\[\]{}\"]|'(?:(?<=^')|(?<=[^A-Za-z]')|(?![A-Za-z]))))"
)
_SPLIT_BODY = re.compile(_SPLIT.pattern[_SPLIT.pattern.index("(?:"):])  # _SPLIT without its look-ahead
_SPLIT_FIRST = "`.!?;:,\n\u2014\u2015-()[]{}\"'"  # the characters of that look-ahead
#: For an ASCII text's bytes: "!" where a match of _SPLIT_BODY may start, a space elsewhere.
_SPLIT_MARKS = bytes(0x21 if chr(b) in _SPLIT_FIRST else 0x20 for b in range(256))


def _split(prose: str) -> list[str | None]:
    """``_SPLIT.split(prose)``. On an ASCII text, the places a match may start are found by a
    table lookup a byte and ``find``; _SPLIT itself is tried at every character (a few hundred
    machine instructions each), the costliest step of the rule on a plain text."""
    if not prose.isascii():
        return _SPLIT.split(prose)
    marks = prose.encode("ascii").translate(_SPLIT_MARKS)
    match = _SPLIT_BODY.match
    parts: list[str | None] = []
    last = 0
    at = marks.find(0x21)
    while at >= 0:
        found = match(prose, at)  # (look-behinds and ^ see the whole text, as in split)
        if found is None:
            at = marks.find(0x21, at + 1)
            continue
        parts.append(prose[last:at])
        parts += found.groups()
        last = found.end()
        at = marks.find(0x21, last)
    parts.append(prose[last:])
    return parts


def _clauses(canonical: str) -> list[tuple[list[tuple[str, str, str]], bool, bool]]:
    """The clauses of the text, each as (tokens, quoted, asks): ``quoted`` for the inside of brackets
    or quotation marks, which is a clause of its own and is cut out of the clause around it (so
    ``File content (85812 tokens) exceeds`` is the clause ``File content exceeds``); ``asks`` for a
    clause that ends with a question mark outside any bracket or quotation."""
    clauses: list = []
    stack: list[list] = []  # the clauses a bracket or quote interrupted, innermost last
    current: list = []
    open_quotes = {'"': False, "'": False}  # each kind of quotation mark alternates on its own
    parts = _split(_prose(canonical))
    for i in range(0, len(parts), 4):
        text = parts[i]
        if text and not text.isspace():
            if "`" in text:
                text = text.replace("`", " ")
            raws = text.split()
            # The tokens looked up in one C loop; None for a clause word or a token not seen yet,
            # which are then taken one by one (the runs between them added whole).
            got = list(map(_TOKENS.get, raws))
            start = 0
            for _ in range(0 if all(got) else got.count(None)):
                k = got.index(None, start)
                if k > start:
                    current += got[start:k]
                start = k + 1
                raw = raws[k]
                token = _TOKENS.get(raw, _UNSEEN)
                if token is _UNSEEN:
                    token = _token(raw)
                    if token[0] == _W:
                        # words carry whether they are English (step 4), found once per word
                        token = None if token[2] in _CLAUSE_WORDS else token + (is_english_word(token[2]),)
                    if len(_TOKENS) >= _TOKENS_LIMIT:
                        _TOKENS.clear()
                    _TOKENS[raw] = token
                if token is None:  # a clause word: then, so, but ...
                    if current:
                        clauses.append((current, bool(stack), False))
                    current = []
                else:
                    current.append(token)
            if start < len(got):
                current += got[start:] if start else got
        if i + 1 >= len(parts):
            break
        code, bound, mark = parts[i + 1], parts[i + 2], parts[i + 3]
        if mark == "(" and text and not text[-1].isspace() and current and current[-1][1] == text.split()[-1]:
            current[-1] = (_O, current[-1][1], current[-1][1])  # a call: expect(response)
        if code is not None:
            current.append((_C, code, code))
            continue
        if bound is not None:
            if current:
                clauses.append((current, bool(stack), "?" in bound and not stack))
            current = []
            continue
        if mark in "\"'":
            opens = not open_quotes[mark]
            open_quotes[mark] = opens
        else:
            opens = mark in "([{"
        if opens:
            stack.append(current)
            current = []
        else:
            if current:
                clauses.append((current, True, False))
            current = stack.pop() if stack else []
    while True:
        if current:
            clauses.append((current, bool(stack), False))
        if not stack:
            break
        current = stack.pop()
    return clauses


def _is_past(word: str, c: _Compiled) -> bool:
    if word in c.past:
        return True
    if not word.endswith("ed") or len(word) < 4:
        return False
    verbs = c.verbs
    return (word[:-2] in verbs or word[:-1] in verbs or (word.endswith("ied") and word[:-3] + "y" in verbs)
            or (len(word) >= 5 and word[-3] == word[-4] and word[:-3] in verbs))


def _is_s_form_of_verb_only(word: str, c: _Compiled) -> bool:
    if not word.endswith("s") or len(word) < 3:
        return False
    verbs = c.verbs
    for base in (word[:-1], word[:-2] if word.endswith("es") else "", word[:-3] + "y" if word.endswith("ies") else ""):
        if base and verbs.get(base) == "o":
            return True
    return False


def _content_word(token: tuple[str, str, str] | None, c: _Compiled) -> bool:
    """A word that is not a function word, a skipped opener nor an -ly adverb, or a token of kind
    other that holds a letter (``step-by-step``)."""
    if token is None:
        return False
    if token[0] == _O:
        return _HAS_LETTER.search(token[1]) is not None
    if token[0] != _W:
        return False
    word = token[2]
    return word not in c.function and not word.endswith("ly")


def _has_predicate(rest: list[tuple[str, str]], c: _Compiled) -> bool:
    """Whether, within its first six tokens, ``rest`` holds the predicate of a noun phrase
    opened by the verb before it (the opener is then the subject: ``Build failed``)."""
    if rest and rest[0][0] == _W and rest[0][2] in c.objects:
        return False  # an object right after the verb: Run the tests
    for j, token in enumerate(rest[:6]):
        if token[0] != _W:
            continue
        word = token[2]
        if word in _STOPS:
            return False
        if word in PREDICATE_WORDS or _is_s_form_of_verb_only(word, c):
            return True
        if _is_past(word, c) and not _content_word(rest[j + 1] if j + 1 < len(rest) else None, c):
            return True
    return False


def _opener(tokens: list[tuple[str, str, str]], c: _Compiled) -> tuple[int, list]:
    """Index of the clause's first word once decoration, adverbs, politeness, vocatives, words
    that are not English, purpose prefixes and labels are skipped (``len(tokens)`` when nothing is
    left), and the tokens (a look-alike token read as a word: ``Alw4ys``)."""
    n = len(tokens)
    i = 0
    while i < n:
        kind = tokens[i][0]
        if kind == _S or (kind == _N and i == 0):
            i += 1
            continue
        if kind == _O and _LEET_TOKEN.fullmatch(tokens[i][1]):
            word = tokens[i][1].lower().translate(_LEET)  # Alw4ys
            tokens = tokens[:i] + [(_W, tokens[i][1], word)] + tokens[i + 1 :]
        elif kind != _W:
            return i, tokens
        word = tokens[i][2]
        if word in SKIPPED_OPENERS or (word.endswith("ly") and len(word) > 4 and word not in c.verbs):
            i += 1
            continue
        if word not in c.verbs and not is_english_word(word):  # Sempre use ..., Dialyzer failed
            i += 1
            continue
        for phrase in _PHRASE_FIRST.get(word, ()):
            k = len(phrase)
            if all(t[0] == _W for t in tokens[i : i + k]) and tuple(t[2] for t in tokens[i : i + k]) == phrase:
                i += k
                break
        else:
            if word == "to" and i + 1 < n and tokens[i + 1][0] == _W and tokens[i + 1][2] in c.verbs:
                i += 2  # a purpose prefix: "to fix this", "to avoid the error"
                if i < n and tokens[i][0] == _W:
                    following = tokens[i][2]
                    if following in ("this", "it", "that", "these", "those"):
                        i += 1
                    elif following in ("the", "a", "an", "your", "my", "our") and i + 1 < n:
                        i += 2
                continue
            if word in LABELS and all(t[0] == _N for t in tokens[i + 1 :]) and n - i <= 2:
                return n, tokens
            return i, tokens
    return n, tokens


def _imperative(tokens: list[tuple[str, str]], quoted: bool, c: _Compiled) -> str | None:
    """The imperative a clause opens with, or None."""
    if quoted and len(tokens) == 1:
        return None  # one quoted or bracketed word is a name: Job "build" failed, [FORMAT]
    i, tokens = _opener(tokens, c)
    if i >= len(tokens):
        return None
    token = tokens[i]
    for name in NAMES:
        if tuple(t[1] for t in tokens[i : i + len(name)]) == name:
            return None  # Open Memory: a name, not the verb "open"
    if token[0] == _W:
        word = token[2]
    elif token[0] == _O and _REDO.fullmatch(token[1]):
        word = token[1][3:].lower()  # Re-run the job
    else:
        return None
    if word in ALWAYS_IMPERATIVE:
        return word
    flag = c.verbs.get(word)
    if flag is None:
        return None
    rest = tokens[i + 1 :]
    if rest and all(t[0] in (_N, _S) for t in rest):
        return None  # a verb, then numbers and symbols only: Step 1, (char 255), assert 401 == 200
    if rest and rest[0][0] == _W and rest[0][2] == "of" and word not in VERBS_WITH_OF:
        return None  # a noun: borrow of moved value, use of undeclared crate
    if c.past.get(word, word) != word:
        return None  # the past form of another verb: found `str` (find)
    if flag == "n":
        if rest and rest[0][0] == _W and rest[0][2] in c.objects:
            return word
        if rest and rest[0][0] in (_C, _T):
            return None if _has_predicate(rest, c) else word  # function Foo.bar/0 is undefined
        for j in range(1, len(rest) - 1):
            if rest[j][0] == _W and rest[j][2] in _TOWARDS and (
                    rest[j + 1][0] in (_C, _T)  # Copy keys to /tmp
                    or (rest[j][2] == "to" and rest[j + 1][0] == _W and rest[j + 1][2] in c.verbs)):  # List things to say
                return word if not _has_predicate(rest, c) else None
        return None
    if _has_predicate(rest, c):
        return None
    return word


#: (ending, letters removed, letters added): the inflections the language check undoes.
_SUFFIXES = (
    ("s", 1, ""), ("es", 2, ""), ("ies", 3, "y"), ("ed", 2, ""), ("ed", 1, ""), ("ied", 3, "y"),
    ("ing", 3, ""), ("ing", 3, "e"), ("er", 2, ""), ("er", 1, ""), ("ier", 3, "y"), ("est", 3, ""),
    ("est", 2, ""), ("iest", 4, "y"), ("ly", 2, ""), ("ily", 3, "y"), ("ally", 4, ""), ("bly", 3, "ble"),
)


@lru_cache(maxsize=65536)
def is_english_word(word: str) -> bool:
    """Whether a lower-case word (ASCII letters, at most one inner apostrophe) is English for the
    language check: in the word list, or an inflection of a listed word (PROTOCOL.md's suffix rules)."""
    english = _tables().english
    if word in english or (word.endswith("'s") and word[:-2] in english):
        return True
    for ending, cut, add in _SUFFIXES:
        if word.endswith(ending) and len(word) - cut >= 2 and word[:-cut] + add in english:
            return True
    for ending in ("ed", "ing", "er", "est"):  # a doubled letter: stopped, running, bigger
        cut = len(ending) + 1
        if word.endswith(ending) and len(word) - cut >= 2 and word[-cut] == word[-cut - 1] and word[:-cut] in english:
            return True
    return False


def _counts(clauses: list) -> tuple[int, int, int, int, int]:
    """The language check's counts: (counted, foreign, symbols, tokens_seen, candidates). Tokens
    are all but code spans, symbols those without a letter or digit, candidates the words not
    English; counted are the words as written in lower case (or capitalised, first in a clause),
    foreign those of them not English, both 0 when there are fewer than 2 candidates (the word
    test cannot refuse: they are not counted)."""
    counted = foreign = symbols = tokens_seen = candidates = 0
    for tokens, _, _ in clauses:
        for token in tokens:
            kind = token[0]
            if kind != _C:
                tokens_seen += 1
                if kind == _S:
                    symbols += 1
                elif kind == _W and not token[3]:
                    candidates += 1
    if candidates < 2:
        return 0, 0, symbols, tokens_seen, candidates
    for tokens, _, _ in clauses:
        first = True
        for token in tokens:
            if token[0] != _W:
                continue
            word = token[1]
            lowered = token[2]
            if lowered == word or (first and word[0] != lowered[0] and word[1:] == lowered[1:]):
                counted += 1
                if not token[3]:
                    foreign += 1
            first = False
    return counted, foreign, symbols, tokens_seen, candidates


def _language(folded: str, clauses: list, c: _Compiled) -> ObservationViolation | None:
    if not folded.isascii():
        spaced = _SPACES.sub(" ", folded.translate(_LINE_BREAKS))
        prose = _PATH_TOKEN.sub(" ", _CODE_SPAN.sub(" ", spaced))
        letter = c.other_script.search(prose)
        if letter is not None:
            return ObservationViolation("other-script", letter.group())
    counted, foreign, symbols, tokens_seen, candidates = _counts(clauses)
    if tokens_seen >= 6 and 2 * symbols > tokens_seen and candidates < 2:
        return ObservationViolation("not-english", f"{symbols} of {tokens_seen} tokens are symbols")
    if candidates < 2:  # fewer than 2 words that are not English: the word test cannot refuse
        return None
    if foreign >= 2 and 3 * foreign > counted:
        return ObservationViolation("not-english", f"{foreign} of {counted} words")
    if tokens_seen >= 6 and 2 * symbols > tokens_seen:
        return ObservationViolation("not-english", f"{symbols} of {tokens_seen} tokens are symbols")
    return None


def _select(canonical: str, selectors: tuple) -> tuple[list[str], list, list, bool]:
    """The forms of the text the patterns are searched in (the lowered text, then, when they differ
    from it, the text without the hyphens inside words and with the digits of look-alike words read
    as letters), the addressed and the obligation patterns their words select (the ASCII words of
    them all, and ``<`` and ``[`` when the lowered text holds them), and whether the text may report
    an instruction (it holds ``to`` and a reporting verb)."""
    lowered = " ".join(canonical.replace("`", " ").split())
    lowered = lowered.lower() if lowered.isascii() else lowered.translate(_ASCII_LOWER)
    texts = [lowered]
    if "-" in lowered and _HYPHENATED.search(lowered):
        texts.append(_HYPHENATED.sub("", lowered))  # i-nstruction, as-sis-tant
    if _digit_by_letter(lowered) and _LEET_WORD.search(lowered):
        texts.append(_LEET_WORD.sub(_unleet, lowered))  # 1gn0r3 pr3v10us 1nstruct10ns
    joined = " ".join(texts)
    if joined.isascii():  # (bytes.translate is a table lookup a byte; str.translate, a dict lookup)
        words = set(joined.encode("ascii").translate(_ASCII_WORD_SPACES).decode("ascii").split())
    else:
        words = set(_ASCII_WORDS.findall(joined))
    for mark in "<[":  # the role-token patterns are selected by the character they start with
        if mark in lowered:
            words.add(mark)
    reported = "to" in words and not _REPORTING.isdisjoint(words)
    return texts, _selected(_ADDRESSED, selectors[0], words), _selected(_OBLIGATION, selectors[1], words), reported


def _next_clause(clauses: list, start: int, verbs: dict) -> int:
    """The index of the first clause from ``start`` that asks or may open with an order, else
    ``len(clauses)``: the quick exit of the imperative walk skips a clause whose first token is a
    code span, or an English word that is no verb, opens nothing (_OPENING), ends not in ``ly``
    and is not the name ``Open``: that token is the clause's opener, and no verb."""
    for i in range(start, len(clauses)):
        tokens, _, asks = clauses[i]
        if asks or not tokens:
            return i
        first = tokens[0]
        if first[0] == _C or (first[0] == _W and first[3] and first[2] not in verbs and first[2] not in _OPENING
                              and not first[2].endswith("ly") and first[1] != "Open"):
            continue
        return i
    return len(clauses)


_HABIT_CUES = ("agent", "assistant", "claude", "copilot", "codex", "gemini", "bot", "model", "session")
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{12}")  # (what every encoded blob holds)
_MARKUP_RES = tuple(_compile(p) for p in MARKUP_PATTERNS)
_TAG_RES = tuple(_compile(p) for p in TAG_PATTERNS)
_ENCODED = _compile(ENCODED_PATTERN)


def _s_form_base(word: str, verbs: dict) -> str | None:
    """The verb of ``verbs.txt`` whose third-person present ``word`` is (``runs`` run, ``pushes``
    push, ``copies`` copy), or None."""
    if len(word) < 3 or not word.endswith("s") or word.endswith("ss"):
        return None
    if word.endswith("ies") and word[:-3] + "y" in verbs:
        return word[:-3] + "y"
    if word[:-1] in verbs:
        return word[:-1]
    if word.endswith("es") and word[:-2] in verbs:
        return word[:-2]
    return None


def _prescription(lowered: str, c: _Compiled) -> ObservationViolation | None:
    """A habit told of the agent or the sessions, or an action prescribed under a condition (rule
    ``obligation``), in the lowered text; None when there is none."""
    verbs = c.verbs
    # (quick exits, each a condition every match needs: a subject holds one of these words; a
    # condition holds ", " and "if", "when", "once" or "time")
    habit = any(word in lowered for word in _HABIT_CUES)
    condition = ", " in lowered and ("if" in lowered or "when" in lowered or "once" in lowered or "time" in lowered)
    if not habit and not condition:
        return None
    for match in _HABIT.finditer(lowered) if habit else ():
        subject, word = match.group(1), match.group(3)
        base = _s_form_base(word, verbs) if subject in HABIT_SUBJECTS_SINGULAR else (word if word in verbs else None)
        if (base is not None and base not in HABIT_UNDERGOING and word not in c.function
                and word not in PREDICATE_WORDS):
            return ObservationViolation("obligation", match.group())
    for match in _CONDITION.finditer(lowered) if condition else ():
        if match.group(1) in ACTION_PARTICIPLES:
            return ObservationViolation("obligation", match.group())
    return None


def _markup(lowered: str, canonical: str) -> ObservationViolation | None:
    """A link, an image or a script URL (in the lowered text), an HTML tag that acts (in the lowered
    text outside code spans and double quotes) or an encoded blob (in the canonical text): rule
    ``markup``."""
    if "](" in lowered or "<" in lowered or "://" in lowered:  # (what every markup pattern holds)
        for regex in _MARKUP_RES:
            match = regex.search(lowered)
            if match is not None:
                return ObservationViolation("markup", match.group())
    if "<" in canonical:
        outside = " ".join(_UNQUOTED.sub(" ", canonical).replace("`", " ").split()).translate(_ASCII_LOWER)
        for regex in _TAG_RES:
            match = regex.search(outside)
            if match is not None:
                return ObservationViolation("markup", match.group())
    match = _ENCODED.search(canonical) if _BASE64_RUN.search(canonical) else None
    if match is not None:
        return ObservationViolation("markup", "an encoded blob: " + match.group()[:40])
    return None


def _program_prefix(clauses: list, at: int, canonical: str) -> bool:
    """Whether clause ``at`` is the name of a program that prefixes its message: the text's first
    clause, not its only one, one word written in lower case, unquoted, with which the text (less
    leading spaces) opens, followed by a colon (``make: *** No rule to make target``, ``touch:
    cannot touch``; ``Run: ...`` stays an order)."""
    tokens, quoted, _ = clauses[at]
    if at != 0 or len(clauses) < 2 or quoted or len(tokens) != 1 or tokens[0][0] != _W:
        return False
    word = tokens[0][1]
    return word == tokens[0][2] and canonical.lstrip(" ").startswith(word + ":")


def _named_value(clauses: list, at: int, canonical: str) -> bool:
    """Whether clause ``at`` is a value named by the clause before it: the text's last clause, one
    word, unquoted, after a colon that ends the text's one clause before it, which is no label
    (``declared and not used: err``; ``Fix: revert`` stays an order)."""
    tokens, quoted, _ = clauses[at]
    if at != 1 or len(clauses) != 2 or quoted or len(tokens) != 1 or tokens[0][0] != _W:
        return False
    before = clauses[0][0]
    if not before or (before[0][0] == _W and before[0][2] in LABELS):
        return False
    end = canonical.rstrip(" .\n")
    return end.endswith(tokens[0][1]) and end[: -len(tokens[0][1])].rstrip(" ").endswith(":")


def observation_violation(text: str) -> ObservationViolation | None:
    """Return the first way ``text`` breaks the observation rule, or None if it is an observation."""
    return _violation(text, False)


def _violation(text: str, language_first: bool) -> ObservationViolation | None:
    """:func:`observation_violation`; with ``language_first``, the language test (cheap once the
    clauses are made) runs before the clause scan rather than after it: *which* violation is
    returned may then differ, *whether* there is one does not (each test reads the text alone)."""
    c = _tables()
    if text.isascii():  # (canonical_form's first step)
        folded = canonical = text
    else:
        folded, canonical = canonical_form(text)
    texts, addressed, obligation, reported = _select(canonical, _selectors())
    lowered = texts[0]
    for regex in addressed:
        for text_form in texts:
            match = regex.search(text_form)
            if match is not None:
                return ObservationViolation("addressed-to-agent", match.group().strip())
    for regex in obligation:
        for text_form in texts:
            match = regex.search(text_form)
            if match is not None:
                return ObservationViolation("obligation", match.group().strip())
    if reported:
        for match in _REPORTED_RE.finditer(lowered):
            if match.group(1) in c.verbs:
                return ObservationViolation("obligation", match.group())
    prescribed = _prescription(lowered, c)
    if prescribed is not None:
        return prescribed
    marked = _markup(lowered, canonical)
    if marked is not None:
        return marked
    clauses = _clauses(canonical)
    if language_first:
        foreign = _language(folded, clauses, c)
        if foreign is not None:
            return foreign
    n = len(clauses)
    verbs = c.verbs
    at = _next_clause(clauses, 0, verbs)
    while at < n:
        tokens, quoted, asks = clauses[at]
        if asks:  # a lesson states; it does not ask
            return ObservationViolation("addressed-to-agent", "a question: " + " ".join(t[1] for t in tokens[:8]))
        verb = _imperative(tokens, quoted, c)
        if (verb is not None and not _named_value(clauses, at, canonical)
                and not _program_prefix(clauses, at, canonical)):
            return ObservationViolation("imperative-opening", verb)
        at = _next_clause(clauses, at + 1, verbs)
    return None if language_first else _language(folded, clauses, c)


def is_observation(text: str) -> bool:
    """Whether ``text`` is an observation (:func:`observation_violation` is None; the tests in an
    order that refuses a text of other words sooner)."""
    return _violation(text, True) is None


def check_observation(text: str) -> str:
    """Return ``text`` unchanged if it is an observation, else raise NotAnObservation."""
    violation = observation_violation(text)
    if violation is not None:
        raise NotAnObservation(violation)
    return text
