"""Is this message of the person's a correction of what the agent just did?

A reader decides from three things, and so does :func:`correction_cue`: the message's words
(does it say what the agent did was wrong, unwanted or did not work?), whether it *refers* to
what the agent just did or said (its last statement, its last calls: the program, file or value
it names), and what the agent did *next* (:func:`course_change`: it undid its work, redid it
with other arguments, conceded, or stopped). The last is in the transcript and no one can
phrase around it. The decision is a pure function of a :class:`Turn`, normalised events that
any agent's adapter yields (Claude Code, Codex, Gemini): the message, how it came (``via``),
the agent's statement and calls before it and its calls and statement after it. Nothing here
reads a transcript format.

The rule, in order, first match wins (docs/corrections.md has it with examples and figures).
*Refers*: a word of the agent's last statement or of its last calls, an opening "that", "it",
"you", ..., or the agent undoing, redoing or conceding its last work right after.
*Went on*: the calls after are known and show no course change (for steps 5-7, calls on a file
or program the message names in place of its own are following it, not going on).
*Interrupted*: the person stopped the agent just before; the message then refers, and the work
did not go on, for steps 6-7; it is no correction by itself.

====  ===============================================  ===========================  ==================
step  the message                                      the agent next (after)       decision
====  ===============================================  ===========================  ==================
1     feedback given when rejecting a tool call        any                          ``rejected``
2     the session's first message, or nothing of the  any                          not one
      agent's before it
3a    the person takes back their own words ("scratch  any                          not one
      what I said") or says it is no objection
3     a *strong* cue: "that's not what I asked", "I    any                          the cue
      said ...", "we agreed", "you should have",
      "why did you ...", "you forgot / didn't / broke
      ...", "that's wrong", "that's not our X", "(no,)
      undo / revert / roll it back ...", "did you
      push?" with no push among the calls before
4     a shape that is not one: a request for more,     undid its work, or conceded  ``changed``
      an answer to the agent's question or plan,       admitting the work wrong,
      approval first, praise, relief, later ("wait     no question to the person
      for", "at some point"), the end of the work, a   anything else                not one
      question to the agent, only questions, "fyi",
      reassurance, taking it back ("you're right"),
      the person's own doing, resuming
4b    after an interrupt                               no call (it stayed stopped)  ``interrupted``
5     it still / again does not work: and it refers    did not go on                ``still``
      (else a bug report about the product)            went on                      not one
6     a weak cue ("no", "actually", "instead",         did not go on (interrupt:    the cue
      "stop", "wait", "don't X" / "no X", "you ran X   any)
      without Y", "you used X" and X is deprecated;    went on                      not one
      not one that goes on to ask or plan): and it
      refers
7     a stated preference ("please use X", "we use     did not go on (interrupt:    ``prefer``
      X", a house rule, "X, not Y", "do Y instead",    any)
      "keep the X", "back to X", ...): and it refers   went on                      not one
8     anything else, the agent having asked the        undid or redid               not one
      person a question
      anything else                                    undid, conceded (or promised ``changed``
                                                       to work otherwise), switched
                                                       to the program the message
                                                       names, or redid it and the
                                                       message judges it, gives
                                                       another number (not after
                                                       approval), or the agent
                                                       acknowledges
8b    a rejection of the last work ("broke", "lost",   did not go on                ``rejects``
      "fails", "missing", "just hides it", ...) or a
      denial of the agent's statement, that refers,
      accepting nothing ("expected", "fine")
9     anything else that refers to the work the agent  redid it                     ``changed``; if the
      redid                                                                         message only asks
                                                                                    for more:
                                                                                    borderline (not one
                                                                                    unless a second
                                                                                    opinion says so)
10    anything else                                    any                          not one
====  ===============================================  ===========================  ==================

*Course change* (:func:`course_change`): ``undo`` (an after call reverts: ``git checkout --``,
``git restore``, ``git revert``, ``git reset``, a rollback, an uninstall, removing or moving a
file it had just written or says it made, deleting what a call before created or imported, the
inverse verb of a call before: ``reopen`` after ``close``), ``conceded``
(its next statement concedes: "sorry", "you're right", "good catch", "reverted", "restored", or
promises to work otherwise: "won't ... again", "from now on"), ``stopped`` (no call at all after
the message), ``redo`` (it runs a program it had just run, any of a command line's, with other
arguments, or edits again a file, by its path, it had just edited or run). ``None``: it went on
with other work (reads only count as going on).
``after=None``: the calls after are not known (the data has none): the words and the reference
decide alone. The second opinion (step 9) is :mod:`openmemory_local.ingest.corrections_lm`, the local
model, off by default.

``benchmarks/corrections.py`` prints precision and recall on each labelled set, saying which
was used while writing this rule (in-sample) and which was not (held-out). Corrections feed the
repeat-yourself measure (:mod:`openmemory_local.eval.measures`, :func:`same_correction`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Callable, Iterable

__all__ = ["correction_cue", "decide", "is_borderline", "course_change", "is_read", "AFTER_CALLS", "Turn", "CUES",
           "STRONG_CUES", "same_correction", "correction_terms", "SAME_CORRECTION_COSINE"]

STRONG_CUES = ("rejected", "restated", "why", "omitted", "reminder", "undo", "wrong")
CUES = STRONG_CUES + ("still", "stop", "wait", "no", "dont", "actually", "you_did", "prefer", "changed",
                      "rejects", "interrupted", "second_opinion")


@dataclass(frozen=True)
class Turn:
    """One person message with what is around it, in agent-neutral terms.

    ``before``/``after``: the agent's tool calls (oldest first) before the message and after it
    (up to the next message of the person), each ``{"tool", "heads", "command"}``; ``after``
    None: not known. ``agent_said``/``after_said``: its statement just before and its first one
    after. ``first``: nothing of the agent's came before. ``interrupted``: the person stopped the
    agent's work (an interrupt, a rejected call) just before writing the message.
    """

    message: str
    via: str = "message"
    agent_said: str | None = None
    before: tuple = ()
    after: tuple | None = None
    after_said: str | None = None
    first: bool = False
    interrupted: bool = False


_FILLER = re.compile(r"^(?:(?:ok(?:ay)?|hmm*|hm+|uh+|um+|oh|well|so|hey|erm|whoa|woah|ugh|argh|oops|yikes)\b[\s,.!]*)+")
_LEADING = re.compile(r"^[\s\"'`*_>#~\-\u2022(\[]+")
_RESTATED = re.compile(r"\b(?:that'?s not what i|that is not what i|not what i (?:asked|wanted|meant|said)|"
                       r"we (?:agreed|decided|settled on|discussed)|you should(?:'ve| have)|you were supposed to|"
                       r"(?:that|it|this) (?:was|is) supposed to|"
                       r"i (?:already )?(?:said|told you)|i asked (?:you )?(?:to|for|not)|as i said)\b")
_WHY = re.compile(r"^(?:but )?(?:why (?:did|are|would|do|have) you|who told you to|what are you doing)\b")
_OMITTED = re.compile(r"\byou (?:forgot|didn'?t|did not|missed|broke|deleted|removed|ignored|skipped|never|"
                      r"haven'?t|have not|still haven'?t|overwrote|reverted)\b")
_STILL = re.compile(
    r"\b(?:still|again)\b.{0,40}\b(?:not|n't|fail\w*|broken|wrong|same|error\w*|crash\w*|happen\w*|there|no|blank|"
    r"empty|missing|red|grey|gray|slow|stuck|hangs?|hanging|nothing)\b"
    r"|\b(?:still|again) (?:fail\w*|broken|crash\w*|the same)\b"
    r"|\b(?:doesn'?t|does not|didn'?t|did not|isn'?t|is not) (?:seem to )?(?:work|help|fix|change)\w*"
    r"|\bnot working\b|\bsame (?:error|problem|issue|failure|result|thing)\b|\bnothing (?:changed|happens|happened)\b"
    r"|^(?:that|this|it|you) (?:broke|made it worse)\b")
_DID_YOU = re.compile(r"^did you (?:\w+ )?(\w+)(?: (\w+))?")
_UNDO = re.compile(r"^(?:please )?(?:undo|revert|roll ?back|roll (?:it|that|this|them) back|put (?:it|that) back|"
                   r"reopen|restore|re-?enable)\b"
                   r"(?! (?:is|of|was)\b)")
_WRONG = re.compile(r"^(?:wrong\b(?! answers?\b)|that'?s (?:wrong|incorrect|not right)|this is (?:wrong|incorrect)|"
                    # a denial of what the agent said or used ("that's not our package", "that's not a bug")
                    r"(?:that|this|it|those|these)(?:'?s| is| was|'re| are| were) not (?:a |an |our |my |the |your )?"
                    r"(?!(?:a |an )?(?:problem|issue|big deal|bad|worry|concern|blocker|priority|urgent|needed|"
                    r"necessary|"
                    r"important|required|a must|for now|yet|done yet|what)\b)[\w.-]+|"
                    r"incorrect\b|not that\b|not this (?:one|file|way)\b)")
_STOP = re.compile(r"^(?:please )?stop(?:[\s,.!;:\-\u2014]*$|\s*[,.!;:\-\u2014]|\s+(?:it|that|this|doing|using|running|"
                   r"editing|changing|touching|now|right)\b)")
_WAIT = re.compile(r"^(?:wait|hold on|hang on)(?:[\s,.!;:\-\u2014]|$)(?!\s*(?:for|until|till|to)\b)")
_NO = re.compile(r"^(?:no+|nah|nope)(?:\s*[,.!;:\-\u2014]|\s*$|\s+no\b|\s+not\b)")
_DONT = re.compile(r"^(?:please )?(?:don'?t|do not|never)\s+(?!worry|forget|bother\b)(.*)")
#: "no auto-approve on prod": a prohibition of what it names (read as "don't", step 6).
_NO_THING = re.compile(r"^no\s+(?!(?:idea|hurry|rush|worries|problem|need|thanks|way|matter|more|longer|one|not|"
                       r"clue|luck)\b)([\w.+-]+(?: [^.!?]*)?)")
_ACTUALLY = re.compile(r"^(?:actually|instead\b(?! of (?:me|us)\b))\b[\s,]*(.*)")
_ASKS = re.compile(r"\b(?:(?:can|could|would) you|you (?:can|could|might))\b(?! not\b)")
_REQUEST = re.compile(r"^(?:(?:can|could|would|will) you|also|let'?s|please (?:also )?add|and\b|how about|maybe also|"
                      r"add\b|what about)")
# Shapes that are not corrections (step 4): asking for more, answering, thanking, later, done.
_NOT_ONE = re.compile(
    r"\bone more thing\b|\b(?:can|could|would) you (?:also|too)\b|\balso\b.{0,60}\?|\btoo\s*\?|"
    r"^(?:wait|oh wait|actually|and|ok|okay)[,.!\s]+also\b|\b(?:add|include|install|make|create)\b[^.?!]{0,40}\btoo\b|"
    r"\btoo,?(?: please| pls)?[.!]*\s*$|"
    r"\bwhile you'?re (?:in |at )?(?:there|it)\b|\blet'?s (?:also|do the same|look|move on|continue|keep going|"
    r"now|start|switch to)\b|\bnext step\b|\bthe next (?:one|task)\b|"
    r"\b(?:works|working) now\b|\bgood (?:call|catch|idea|job|work)\b|\blooks (?:good|great)\b|\bwell done\b|"
    r"\b(?:nice|great|perfect)\b[!.\s]*$|^.{0,50}\b(?:thanks|thank you|thx|ty)\b[!.\s]*$|"
    r"^now (?:instead of|make|add|show|try|do|let'?s|write|create|can you)\b|"
    r"\b(?:that'?s|it'?s|this is|looks) (?:perfect|great|exactly (?:right|it|what i (?:wanted|asked|meant)))\b|"
    r"\bgive me a (?:minute|sec(?:ond)?|moment|bit)\b|^(?:but )?don'?t worry\b|"
    r"^fyi\b|^(?:please )?(?:don'?t forget|remember) to\b|\bdon'?t stop there\b|\bstop there\b|"
    r"\bthat'?s enough\b|\bbefore that\b|^(?:ok(?:ay)?|alright|cool|nice|great)[,.!]?\s+now\b|"
    r"\bwhile you'?re (?:in|at)\b|"
    # the person's own doing, then resuming ("wait, I had to restart docker ... ok done, run it again")
    r"\bok(?:ay)?[,.]? (?:it'?s |i'?m |all )?(?:done|back(?: up)?|ready|connected|fixed|up|set)\b|"
    r"\b(?:that'?s|that is) (?:all|everything|it for)\b|\bfor (?:today|now)\b|\bstop here\b|"
    r"\bno (?:idea|hurry|rush|worries|problem|need to hurry)\b|"
    r"\b(?:can|could|would) you (?:please )?(?:also )?add\b|"
    # taking it back, confirming, being surprised
    r"\b(?:nvm|never ?mind|forget it|scratch that)\b|\bno (?:\w+ ){0,2}(?:anymore|any more)\b|"
    r"\b(?:at some point|some ?day|down the road|eventually)\b|\byou'?re (?:right|correct)\b|\bmy (?:bad|mistake)\b|"
    r"\bi was (?:wrong|looking at|thinking of|confused)\b|"
    # putting the work aside for now (a change of plan, not of how it was done)
    r"\blet'?s (?:park|pause|shelve|table|put \w+ on hold)\b|"
    # resuming after an interrupt
    r"^(?:sorry,?\s+)?(?:go on|carry on|continue|keep going|proceed|resume)\b|\bby (?:accident|mistake)\b|"
    r"\b(?:that|it|this|the [\w.-]+)(?: part)?(?:'s| is| was| looks) (?:fine|good|ok|okay|right|correct)\b|"
    r"^(?:wait,?\s+|hmm?,?\s+)?really\s*[?,!]")
_TAKEN_BACK = re.compile(r"\b(?:forget|scratch|ignore|disregard|never ?mind|nvm) "
                         r"(?:what i (?:said|asked|wrote|told you)|"
                         r"my (?:last|earlier|previous) (?:message|request|comment|ask))\b|"
                         r"\bi changed my mind\b|\bmy (?:bad|mistake)\b|"
                         # the person says it is no objection ("not objecting, just curious")
                         r"\bnot (?:objecting|complaining|a complaint|criticizing|criticising|pushing back)\b|"
                         r"\bno (?:complaints?|objections?)\b|\bjust curious\b|\bgenuinely asking\b|"
                         r"\bout of curiosity\b")
#: Approval of the last work, opening the message: what follows is about the next work
#: ("sounds good. dont use mockito for that one", "cool. instead of a fixed 50 make it a flag").
_APPROVED = re.compile(r"^(?:sounds good|sgtm|lgtm|looks good|looks great|great|perfect|nice|cool|awesome|excellent|"
                       r"love it|works|that works|good)\b\s*[.!,:;\-\u2014]+(?!\s*so\b)(?![^.]{0,80}\bbut\b)|"
                       r"^(?:ok(?:ay)?,? )?[\w\s'-]{0,30}\b(?:works|worked|passes|looks good)[.!]")
#: An answer yes to the agent's question ("actually yes, go ahead and delete it").
_BUT = re.compile(r"\bbut\b")
_YES = re.compile(r"^(?:yes|yeah|yep|yup|sure|go ahead|please do|do it|ok(?:ay)? do it)\b")


def _only_questions(norm: str) -> bool:
    """Every sentence of the message is a question ("wait, so the cache is per process? how does the
    second worker see it then?"): the person asks the agent, which answers (step 4)."""
    parts = [p for p in re.split(r"(?<=[?.!])\s+", norm[:400].strip()) if p.strip()]
    return bool(parts) and all(p.rstrip().endswith("?") for p in parts)


_LATER = re.compile(r"^(?:please )?(?:stop|wait)\b.{0,80}\b(?:once|when|after|until|till|before)\b|"
                    r"^(?:please )?wait (?:for|till|until)\b")
_QUESTION_TO_AGENT = re.compile(r"^(?:wait,?\s+|actually,?\s+)?(?:is|are|was|were|which|what|where|when|how|who|"
                                r"whose|do|does|why (?:is|are|was|were|does|do))\b[^?]{0,160}\?")
_QUESTION_TO_PERSON = re.compile(r"\?\s*$|\b(?:should i|do you want|would you like|want me to|shall i|let me know|"
                                 r"i can (?:try|also|do)|if you(?:'d)? (?:want|like|prefer))\b",
                                 re.IGNORECASE)
# Step 7: a stated preference.
_PREFER = re.compile(
    r"\b(?:please|pls) use\b|\buse \S+ (?:here|instead)\b|\b(?:we|this (?:repo|project|team|codebase)|"
    r"our \w+) (?:use|uses|are on|is on|'re on|prefer|prefers)\b|\bwe'?re (?:on|using)\b|"
    r"\b(?:it|that|this|they|those|these|the \w+) (?:should|must|needs? to|has to|have to) (?:go|be|live|stay)\b|"
    r"^(?:it|that|this|they|those|(?:the|that|this) [\w.-]+) (?:should|must|needs? to|has to|have to|is supposed to) |"
    r"^(?:that'?s|this is|those are|that is) (?:the )?(?:old|wrong|other|previous|outdated|deprecated|v\d)\b|"
    r"\bi'?d rather (?:you )?not\b|\bi'?d (?:rather|prefer) you\b|^not (?:with|in|on|via|using|as|like|through|into)\b|"
    r"\b(?:doesn'?t|does not|don'?t|do not) exist\b|\berrored out\b|\bnot \S+ (?:please|thanks)\b|"
    r"\brather than\b|\binstead of\b(?! (?:me|us)\b)|\binstead\s*(?:[.!;]|$)|"
    # a house rule ("we never commit .env files", "here we always ...")
    r"\b(?:we|this (?:repo|project|team|codebase)|here we) (?:never|don'?t|do not|always|only)\b|"
    r"\bwe(?:'ve| have)? been (?:avoiding|moving away from|phasing out|using)\b|\bwe avoid\b|"
    r"\bwe \w+ for everything\b|\bwe (?:standardi[sz]ed|settled|agreed) on\b|\b(?:always|never)\b[^.]{0,30}\bhere\b|"
    r"\b(?:is|are) the wrong\b|\bthe wrong one\b|"
    r"\w,\s*not (?!by|for|just|only|yet|sure|really|much|bad|now|today)(?:the |a |an |my |our |in |on )?[\w./-]+|"
    # asking to keep, or to go back to, what the agent's work changed
    r"(?:^|[.!?;,]\s*)(?:please )?(?:keep|leave) (?:it|that|this|them|the|my|our)\b(?! (?:up|going|in mind|posted)\b)|"
    r"\b(?:go|put (?:it|that|them)|change (?:it|that)|set (?:it|that)|switch) back\b|\b(?:back|revert) to\b|"
    r"\bthe way (?:it|they) (?:was|were)\b|\bas (?:it|they) (?:was|were)\b")
#: Words that judge what was done: wrong, unwanted, did not work (with a course change, step 8).
_JUDGED = re.compile(r"\b(?:not|no|n't|never|wrong|worse|bad|broken|breaks?|bypass\w*|miss(?:es|ing)?|too|"
                     r"instead|rather|only|must|should(?:n't)?|needs? to|has to|have to|pointless|meaningless|"
                     r"useless|unsafe|insecure|dangerous|ugly|over\w*kill|ancient|deprecated|outdated|old|"
                     r"skipped|redundant|unnecessary|whole point|nightmare|panics?|wiped|lost|harmful)\b|"
                     r"n't\b|\?\?|!!|"
                     # asking to take away what the agent just added (opening the message or a sentence)
                     r"\bfix (?:it|that|this|those|these|them)\b|"
                     r"(?:^|[.!?;]\s+)(?:please )?(?:lose|drop|remove|get rid of|take (?:it |that |them )?out|"
                     r"strip)\b")
#: "you ran X", "you used X": the opening of step 6's "you did" cue; with what makes it one after it
#: ("without Y", "straight to main") it is :data:`_YOU_DID`.
_YOU_DID_OPENING = (r"^you(?:'ve| have)? (?:ran|run|used|put|wrote|added|picked|chose|installed|set|made|called|"
                    r"changed|edited|pushed|committed|deleted|created|named)\b")
_YOU_DID = re.compile(_YOU_DID_OPENING + r".{0,80}\b(?:without|instead of|but|wrong|not|too|in the wrong|"
                      r"straight (?:to|into|on)|directly (?:to|into|on))\b")
_YOU_DID_BARE = re.compile(_YOU_DID_OPENING)
#: Words that say what the work used is going away ("it's being shut down in March").
_DEAD = re.compile(r"\b(?:deprecated|shut ?down|sunset\w*|end[- ]of[- ]life|eol|retired|going away|removed in|"
                   r"no longer (?:supported|maintained|exists?))\b")
#: The agent's next statement concedes its last work was wrong (``conceded``) ...
_CONCEDE = re.compile(
    r"\b(?:sorry|apologi[sz]e|my (?:mistake|bad)|you'?re (?:right|correct)|good (?:catch|point)|restored|reverted|"
    r"fair (?:point|enough)|that was (?:too|a mistake|wrong)|^fair\b|"
    r"undid|undone|rolled back|put it back|let me (?:revert|undo|restore|fix that))\b|"
    # a promise to change how it works from now on
    r"\b(?:won'?t|will not|will no longer|i'?ll no longer) (?:\w+ ){0,5}(?:again|without asking)\b|\bfrom now on\b|"
    r"\bgoing forward\b|\bin (?:the )?future\b|\bi'?ll ask (?:first|before)\b", re.IGNORECASE)
#: A concession that says the work was put back ("Restored the original assertion"), stronger than
#: a promise: it overrides the shapes of step 4 (the message was about the work just done).
_CONCEDE_UNDONE = re.compile(r"\b(?:restored|reverted|undid|undone|rolled back|put it back|my (?:mistake|bad)|sorry|"
                             r"apologi[sz]e|fair (?:point|enough)|that was (?:too|a mistake|wrong)|"
                             r"you'?re (?:right|correct)|"
                             r"good catch|i missed)\b|^fair\b", re.IGNORECASE)
#: ... or only acknowledges and redoes (with ``redo``: "Got it, switched to yarn").
_ACK = re.compile(r"\b(?:understood|got it|right[,;:]|ok(?:ay)?[,;:]|switched|moved it|instead|removed it|replaced|"
                  r"changed it|i'?ll (?:use|switch|move))\b", re.IGNORECASE)
_UNDO_CALL = re.compile(
    r"\bgit (?:checkout\s+(?:\S+\s+)?--(?=\s)|restore\b|revert\b|reset\b|stash\b)|\b(?:rollback|roll back|uninstall|"
    r"remove|downgrade)\b|\becto\.rollback\b|\bdb:rollback\b|\bmigrate\b.*\b(?:down|rollback|zero)\b")
_DEICTIC = re.compile(r"^(?:no+[\s,.!]+|actually[\s,]+|wait[\s,.!]+|stop[\s,.!]+|instead[\s,]+)*(?:that|this|it|those|"
                      r"these|you|your|the fix|same|nothing)\b")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+")
_INTERJECTION = re.compile(r"^(?:no+|nope|nah|wait|hold on|stop|actually)[\s,.!;:\-\u2014]+")
_WORD = re.compile(r"[a-z][\w.+-]*")
_STOPWORDS = frozenset(
    "the a an and or but not no yes to of in on at for with from by as is are was were be been it its this that "
    "those these there here you your we our us i me my he she they them what which who when where why how all any "
    "some more most one two just only also too very so then than now again still please thanks thank ok okay "
    "can could would should will shall do does did done don't dont doesn't didn't isn't wasn't have has had "
    "let let's lets use using used make made get got run ran go going want need needs file files thing things "
    "way work works working actually instead wait stop hmm well like into out up down over off about after before "
    "new old same other another first last next back right wrong good bad fine sure yet since because if while "
    "i'd i'm it's that's we're you're".split())
_FIXED = {"push": "push", "pushed": "push", "commit": "commit", "committed": "commit", "test": "test",
          "tests": "test", "run": None, "tested": "test", "build": "build", "lint": "lint", "format": "format",
          "formatted": "format", "deploy": "deploy", "deployed": "deploy", "merge": "merge", "merged": "merge",
          "install": "install", "installed": "install", "rebase": "rebase", "check": None, "save": None}
_READS = frozenset(("read", "grep", "glob", "ls", "bashoutput", "webfetch", "websearch", "todowrite", "todoread",
                    "read_file", "read_many_files", "list_directory", "search_file_content", "glob_files",
                    "google_web_search", "web_fetch", "update_plan", "view_image"))
#: The calls after a message that decide it (reads not counted): the episode builder waits for
#: this many, and :func:`course_change` reads no more.
AFTER_CALLS = 3


def is_read(action: dict) -> bool:
    """A call that only reads (a file, a search, a background job's output): not a course change."""
    return (action.get("tool") or "").lower() in _READS


#: Tools that run a shell command line, and tools that write a file, as agents name them.
_SUBCOMMANDS = frozenset("git npm yarn pnpm cargo go uv pip poetry docker kubectl mix gh terraform helm "
                         "bundle dotnet gradle make npx".split())
_SHELLS = frozenset(("bash", "shell", "shell_command", "local_shell", "exec_command", "run_shell_command"))
_WRITES = frozenset(("write", "edit", "multiedit", "notebookedit", "apply_patch", "write_file", "replace",
                     "edit_file"))


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text[:600]).replace("\u2019", "'").replace("\u2018", "'")
    text = _LEADING.sub("", text.strip().lower())
    return _FILLER.sub("", text)


def _action_words(actions: Iterable[dict]) -> set[str]:
    """The words of what the agent did: programs and subcommands, tools, file names."""
    words: set[str] = set()
    for action in actions:
        words.add((action.get("tool") or "").lower())
        for head in action.get("heads") or []:
            words.update(head.lower().split())
        command = (action.get("command") or "").lower()
        for token in re.findall(r"[\w.+-]+", command[:300]):
            if len(token) > 2:
                words.add(token)
                words.add(token.rsplit("/", 1)[-1].split(".")[0])
                words.add(token.lstrip("-"))  # a flag, as the person names it ("auto-approve")
    words.discard("")
    return words


def _content(text: str) -> set[str]:
    words = set()
    for w in _WORD.findall(text):
        w = w.strip(".-+")
        if len(w) < 3 or w in _STOPWORDS:
            continue
        words.add(w)
        words.add(w.rstrip("s"))
        words.add(_stem(w))  # "polling" is the agent's "poll"
        if "." in w or "/" in w:
            words.add(w.rsplit("/", 1)[-1].split(".")[0])
    return {w for w in words if len(w) >= 3 and w not in _STOPWORDS}


def refers(norm: str, agent_said: str | None, before: list[dict]) -> bool:
    """Whether the message refers to what the agent just did or said: a deictic opening ("that",
    "it", "you", ...) or a content word of its last statement or of its last calls."""
    if _DEICTIC.match(norm):
        return True
    said = _content(norm[:400])
    if not said:
        return False
    theirs = _content((agent_said or "").lower()[-600:]) | {w for w in _action_words(before[-5:]) if len(w) >= 3}
    return bool(said & theirs)


def _names_action(rest: str, actions: list[dict]) -> bool:
    mine = _action_words(actions)
    said = set(_WORD.findall(rest))
    said |= {w.rstrip("s") for w in said} | {w[:-3] for w in said if w.endswith("ing") and len(w) > 5}
    return bool(said & mine)


def _reminder(norm: str, actions: list[dict]) -> bool:
    """"did you push?": a question about a step none of the agent's recent calls shows."""
    if not norm.rstrip().endswith("?"):
        return False
    match = _DID_YOU.match(norm)
    if not match:
        return False
    asked = [_FIXED.get(w, w) for w in match.groups() if w]
    asked = [w for w in asked if w and w not in ("the", "it", "that", "a", "all", "them")]
    if not asked:
        return False
    done = _action_words(actions)
    done |= {w.rstrip("s") for w in done}
    return not any(w in done or w.rstrip("s") in done for w in asked)


def _program(action: dict) -> str:
    """The program a shell call ran, with its subcommand (``git push``, ``kubectl``: a flag is no
    subcommand)."""
    heads = action.get("heads") or []
    tokens = (heads[0] if heads else (action.get("command") or "")).lower().split()
    tokens = [t for t in tokens if "=" not in t or t.startswith("-")]
    if not tokens:
        return ""
    if len(tokens) > 1 and not tokens[1].startswith("-") and (heads or tokens[0] in _SUBCOMMANDS):
        return f"{tokens[0]} {tokens[1]}"
    return tokens[0]


def _programs(action: dict) -> set[str]:
    """Every program of a shell call's command line (``git add -A && git commit -m x``: ``git add``
    and ``git commit``), each as :func:`_program` names it."""
    heads = action.get("heads") or []
    return {_program({"heads": [h]}) for h in heads} - {""} if len(heads) > 1 else {_program(action)} - {""}


def _target(action: dict) -> str:
    return (action.get("command") or "").strip()


def course_change(before: Iterable[dict], after: Iterable[dict] | None, after_said: str | None = None,
                  agent_said: str | None = None) -> str | None:
    """How the agent's calls after a message changed course from its calls before it (see the
    module doc): ``undo``, ``redo``, ``conceded``, ``stopped`` or None (it carried on).
    ``agent_said``: its statement before the message (a file it says it made, then removed, is
    undone work)."""
    if after is None:
        return None
    looked = bool(after)  # it made calls, if only reads (it went on looking into something)
    before = [a for a in before if not is_read(a)][-6:]
    after = [a for a in after if not is_read(a)][:AFTER_CALLS]
    written = {_target(a).rsplit("/", 1)[-1] for a in before if (a.get("tool") or "").lower() in _WRITES}
    written.discard("")
    written_paths = [_target(a) for a in before if (a.get("tool") or "").lower() in _WRITES and _target(a)]
    # what it says it made ("Created migration 0042.") and what its calls named
    said = (agent_said or "")[:600].lower()
    made = (_content(said) | set(re.findall(r"\d{2,}", said))) if _MADE.search(said) else set()
    made |= {w for w in _action_words(before) if len(w) >= 3}
    for a in after:
        command = (a.get("command") or "").lower()
        if _UNDO_CALL.search(command):
            return "undo"
        if re.match(r"\s*(?:rm|mv|git rm|git mv|del)\b", command):
            removed = command.split(None, 1)[-1].split()[-1] if command.split() else ""
            stem = removed.rsplit("/", 1)[-1].split(".")[0]
            if any(w.lower() in command for w in written) or any(
                    part in made for part in re.split(r"[_\-]", stem) if len(part) >= 2):
                return "undo"
        if _DELETES.search(command) and _created_by(command, before):
            return "undo"
        if _reverses(command, before):
            return "undo"
    if after_said and _CONCEDE.search(after_said[:300]):
        return "conceded"
    if not looked and after_said is not None:
        return "stopped"
    ran = {_target(a) for a in before if _is_shell(a)}
    programs = {p for a in before if _is_shell(a) for p in _programs(a)}
    for a in after:
        if _is_shell(a):
            if _programs(a) & programs and _target(a) not in ran:
                return "redo"
        elif _same_file(_target(a), written_paths) or _ran_file(_target(a), before):
            return "redo"
    return None


def _same_file(path: str, paths: list[str]) -> bool:
    """The same file, written as an absolute or a relative path (``/repo/src/a.py``, ``src/a.py``);
    ``services/billing/retry.py`` and ``services/email/retry.py`` are two files."""
    path = path.strip().lstrip("./")
    return bool(path) and any(p == path or p.endswith("/" + path) or path.endswith("/" + p)
                              for p in (q.strip().lstrip("./") for q in paths) if p)


def _ran_file(path: str, before: list[dict]) -> bool:
    """A file the agent's shell calls before ran or read (``python scripts/report.py``): editing it
    next redoes what that call produced."""
    name = path.rsplit("/", 1)[-1].lower()
    if "." not in name or len(name) < 4:
        return False
    return any(name in {t.rsplit("/", 1)[-1] for t in (a.get("command") or "").lower().split()}
               for a in before if _is_shell(a))


_DELETES = re.compile(r"\b(?:delete|destroy|drop|rm|remove|uninstall)\b")
_CREATES = re.compile(r"\b(?:create|add|new|run|apply|install|up|deploy|put|insert|make|import)\b")


def _created_by(command: str, before: list[dict]) -> bool:
    """A delete whose target a call before created (``instances create build-box``, then
    ``instances delete build-box``): a name shared, other than the programs and verbs."""
    mine = {t for t in re.findall(r"[\w.@/:-]{3,}", command) if not t.startswith("-")}
    for b in before:
        other = (b.get("command") or "").lower()
        if not _CREATES.search(other):
            continue
        words = other.split()
        verb = next((i for i, t in enumerate(words) if _CREATES.fullmatch(t)), 2)
        programs = set(words[:verb + 1])  # the program and its verb, not the name it made
        shared = {t for t in re.findall(r"[\w.@/:-]{3,}", other) if not t.startswith("-")} & mine
        if {t for t in shared if t not in programs and not _DELETES.fullmatch(t) and not _CREATES.fullmatch(t)}:
            return True
    return False


#: Verbs and the verbs that reverse them (``bd close X`` then ``bd reopen X``).
_INVERSE = {"reopen": ("close",), "enable": ("disable",), "disable": ("enable",), "unlock": ("lock",),
            "unpause": ("pause",), "resume": ("pause", "suspend"), "unarchive": ("archive",),
            "undeploy": ("deploy",), "unpublish": ("publish",), "unassign": ("assign",), "unlabel": ("label",),
            "untag": ("tag",), "unset": ("set",), "detach": ("attach",), "unmount": ("mount",), "unhold": ("hold",),
            "uncordon": ("cordon",), "cordon": ("uncordon",)}


def _reverses(command: str, before: list[dict]) -> bool:
    """A call that reverses one before it on the same thing: the verb's inverse, run by the same
    program, and an argument in common."""
    tokens = command.split()
    for i, verb in enumerate(tokens[:4]):
        for undone in _INVERSE.get(verb, ()):
            for b in before:
                other = (b.get("command") or "").lower().split()
                if undone in other[:4] and other[:1] == tokens[:1] and set(tokens[i + 1:]) & set(other[1:]) - {undone}:
                    return True
    return False


_MADE = re.compile(r"\b(?:created|added|wrote|written|generated|made|new|set up|installed)\b")


#: What :func:`_decide` returns for a message the rule leaves undecided (step 9).
_BORDERLINE = "borderline"


def decide(turn: Turn, opinion: Callable[[Turn], bool] | None = None) -> str | None:
    """The cue that makes the turn's message a correction (the rule of the module doc), or None.

    ``opinion``: an optional second opinion (:mod:`openmemory_local.ingest.corrections_lm`, the local
    model, off by default), asked only about a *borderline* message (step 9: the agent redid
    the work the message refers to, and the message only asks for more); its yes
    makes the cue ``second_opinion``. Without it a borderline message is not a correction.
    """
    cue = _decide(turn)
    if cue == _BORDERLINE:
        return "second_opinion" if opinion is not None and opinion(turn) else None
    return cue


def is_borderline(turn: Turn) -> bool:
    """Whether the rule leaves the turn to a second opinion (step 9)."""
    return _decide(turn) == _BORDERLINE


def _decide(turn: Turn) -> str | None:
    if turn.via == "rejection":
        return "rejected"
    before = list(turn.before)
    agent_said = turn.agent_said
    if turn.first or (not before and not agent_said):
        return None
    norm = _norm(turn.message)
    if not norm:
        return None
    acted = bool(before)
    # step 3a: the person takes back what they had said ("scratch what I said about the rename, put
    # it back"): the agent's work followed the words taken back
    if _TAKEN_BACK.search(norm[:300]):
        return None
    # step 3: strong cues
    if _RESTATED.search(norm[:200]):
        return "restated"
    if _WHY.match(norm):
        return "why"
    if _OMITTED.search(norm[:200]) and not re.search(r"\byou (?:haven'?t|have not|didn'?t|did not) [^.,;]{0,40}\byet\b",
                                                    norm[:200]):
        return "omitted"
    if norm.startswith("did you") and _reminder(norm, before[-20:]):
        return "reminder"
    bare = _INTERJECTION.sub("", norm, count=1)  # "no, revert it": the cue after the interjection
    # a strong cue opening the message, or one of its sentences ("ugh, pill buttons. revert to ...")
    starts = [norm, bare, *_SENTENCE.split(norm[:400])[1:]]
    if acted and any(_UNDO.match(part) for part in (*starts, *re.split(r",\s+", norm[:400])[1:])):
        return "undo"
    if any(_WRONG.match(part) for part in starts):
        return "wrong"
    # step 4: shapes that are not corrections
    change = course_change(before, turn.after, turn.after_said, agent_said)
    asked_person = bool(agent_said and _QUESTION_TO_PERSON.search(agent_said.strip()[-300:]))
    if (_NOT_ONE.search(norm[:300]) or _LATER.match(norm) or _QUESTION_TO_AGENT.match(norm) or _APPROVED.match(norm)
            or (asked_person and _NO.match(norm)) or (_YES.match(bare) and not _BUT.search(norm[:200]))
            or _only_questions(norm)):
        # unless the agent then undid its work, or conceded to a preference the message opens with
        # ("please use --force-with-lease, Tom pushes to this branch too", then "from now on")
        if asked_person:
            return None
        if change == "undo" or (change == "conceded" and (
                _PREFER.search(_SENTENCE.split(norm[:300])[0].split(",")[0])
                or _CONCEDE_UNDONE.search((turn.after_said or "")[:300]))):
            return "changed"
        return None
    # step 4b: the person stopped the agent's work and it stayed stopped (the agent answered
    # without a call): the message is why ("not before the QA sign-off", "hold up, don't push yet")
    if turn.interrupted and change == "stopped":
        return "interrupted"
    known = turn.after is not None
    went_on = known and change is None
    # for a message whose words object (steps 5-7): the agent's next calls on a file or program the
    # message names, in place of its own, are following it, not going on (unless the message asks)
    went_on_after_cue = went_on and not (_followed(norm, before, list(turn.after or ())[:AFTER_CALLS])
                                         and not _ASKS.search(norm[:300]))
    # the agent undoing, redoing or conceding its last work shows what the message was about
    # (or redoing it with another program the message names: "use pnpm here", then ``pnpm add zod``)
    switched = _switched(norm, before, list(turn.after or ())[:AFTER_CALLS])
    reference = change in ("undo", "redo", "conceded") or switched or refers(norm, agent_said, before)
    # step 5: it still does not work
    if acted and _STILL.search(norm[:300]):
        return "still" if reference and not went_on_after_cue else None
    # step 6: weak cues
    cue = _weak_cue(norm, before, turn.interrupted)
    if cue is not None:
        # "stop", "wait", "instead" and a "no" that answers no question point at what the agent
        # is doing; "don't" names it (``_weak_cue``). After an interrupt the message is about the
        # work the person stopped (it refers), and that work did not go on, whatever came next.
        implied = cue in ("stop", "wait", "dont", "no", "you_did") or norm.startswith("instead") or turn.interrupted
        return cue if (reference or implied) and (turn.interrupted or not went_on_after_cue) else None
    # step 7: a stated preference
    if _PREFER.search(norm[:300]):
        return "prefer" if (reference or turn.interrupted) and (turn.interrupted or not went_on_after_cue) else None
    # step 8: the agent changed course: undid, conceded, switched to the program the message
    # names, or redid the work the message refers to while the message judges it, gives another
    # number, or the agent acknowledges
    # (an answer to the agent's question: what it does next is what the answer asked for)
    if asked_person and change in ("undo", "redo"):
        return None
    # an opening "actually" / "instead" that step 6 read as a request judges nothing
    # ("instead, cargo clippy --fix for the trivial ones, then show me the rest")
    opening = _ACTUALLY.match(norm)
    judged = opening.group(1) if opening else norm
    if change in ("undo", "conceded") or switched:
        return "changed"
    if change == "redo" and reference and ((turn.after_said and _ACK.search(turn.after_said[:300])) or
                                           (_JUDGED.search(judged[:300]) and not _MORE_OPENING.match(norm)) or
                                           (_contradicts(norm, agent_said) and not _asks_for_more(norm))):
        return "changed"
    # step 8b: a rejection addressed at what the agent just did, and the agent did not go on
    if (acted and not went_on and refers(norm, agent_said, before)
            and (_REJECTS.search(norm[:300]) or _denies(norm, agent_said)) and not _ACCEPTS.search(norm[:300])):
        return "rejects"
    # step 9: it redid the work the message refers to: a correction, unless the message only asks
    # for more (a new part, a new property, a look: "make it sticky", "index the tags as well")
    if change == "redo" and reference:
        return _BORDERLINE if _asks_for_more(norm) else "changed"
    return None


#: Words that say the work is wrong, harmful or did not work (step 8b).
_REJECTS = re.compile(r"\b(?:(?:just|only) (?:hides|masks|papers over|works around)|"
                      r"(?:doesn'?t|does not) (?:test|check|do|prove) anything|nothing to do with|"
                      r"wrong|incorrect|broke|broken|breaks|worse|lost|loses|leaks?|unsafe|insecure|"
                      r"dangerous|pointless|meaningless|useless|bogus|nonsense|off|bad|mess(?:ed)? up|"
                      r"asserts nothing|does nothing|not what|no good|fail|fails|missing|crash(?:es|ed)?|forever|"
                      r"infinite)\b")


_NEGATED = re.compile(r"\b(?:doesn'?t|does not|don'?t|do not|isn'?t|is not|aren'?t|are not|won'?t|will not|"
                      r"can'?t|cannot|never)\s+((?:[\w.-]+\s*){1,4})")


def _denies(norm: str, agent_said: str | None) -> bool:
    """The message denies what the agent's statement claimed: a negated phrase whose words are the
    statement's ("it doesn't round half up" after "Round half up with round().")."""
    theirs = _content((agent_said or "").lower()[:600])
    if not theirs:
        return False
    for match in _NEGATED.finditer(norm[:300]):
        words = _content(match.group(1))
        if len(words & theirs) >= 2 or any(len(w) >= 6 for w in words & theirs):
            return True
    return False


_ACCEPTS = re.compile(r"\b(?:expected|fine|ok|okay|acceptable|intended|on purpose|by design)\b")


#: A message that only asks for more: an addition, a new property, a look, the next thing.
_MORE = re.compile(
    r"\b(?:also|too|as well|another|one more|additionally|in addition|next|new)\b|"
    r"(?:^|[.!?;]\s+)(?:(?:now|then|ok|okay|great|nice|cool|good|perfect)[,.!]?\s+)?(?:please\s+)?"
    r"(?:add|make|create|include|implement|write|extend|support|show|print|display|try|check|look|tell|explain|"
    r"continue|tackle|go ahead|proceed|stop by|see|find|search|give|let'?s|(?:can|could|would|will) (?:you|we)"
    r"(?! not\b))\b|"
    r"(?:^|[.!?;]\s+)[\w\s'-]{0,30}\b(?:works|worked|looks (?:good|great|fine|nice))\b[.!,]|"
    # approval first ("nice. now ..."), the same again elsewhere, the next thing
    r"^(?:nice|great|perfect|good|cool|awesome|excellent|love it|lovely|sweet)\b\s*[.!,]|"
    r"\b(?:the same|same thing|the same \w+) (?:for|with|on|in|to)\b|\breminds me\b|\bmove on\b")


#: Steps in order ("..., then show me the rest"): the message plans the next steps.
_THEN = re.compile(r",\s*(?:and\s+)?then\s+[a-z]")
#: A message that opens by adding to the work ("and add a fallback when there's no image").
_MORE_OPENING = re.compile(r"^(?:and|also|plus|additionally)\b")


def _asks_for_more(norm: str) -> bool:
    """Whether the message only asks for more (step 9: the agent's redo then answers a request)."""
    return bool(_MORE.search(norm[:300]) or _MORE.search(_INTERJECTION.sub("", norm[:300], count=1))
                or _MORE_OPENING.match(norm) or _THEN.search(norm[:300]))


#: Shell programs that only look (their arguments are not work done in place of the agent's own).
_SHELL_READS = frozenset(("cat", "less", "head", "tail", "ls", "grep", "rg", "find", "tree", "wc", "git log",
                          "git show",
                          "git status", "git diff", "git branch"))


def _followed(norm: str, before: list[dict], after: list[dict]) -> bool:
    """The agent's next calls are on a file or program the message names and its calls before did
    not: it did what the message says in place of what it did."""
    named = _content(norm[:400])
    if not named:
        return False
    done = {w for w in _action_words(before) if len(w) >= 3}
    for a in after:
        if is_read(a):
            continue
        if _is_shell(a):
            # its program, and the names it gave it that look like a path, a branch or a version
            # ("it has to go on release/2.3", then ``git rebase --onto origin/release/2.3 ...``)
            program = _program(a)
            words = {program.split(" ")[0]}
            if program not in _SHELL_READS:
                words |= {part for t in (a.get("command") or "").lower().split()[1:] if re.search(r"[/.\d]", t)
                          for part in t.strip("'\"").split("/") if len(part) >= 3}
        else:
            target = _target(a).lower().rsplit("/", 1)[-1]
            words = {target, target.split(".")[0]}
        if (words & named) - done:
            return True
    return False


_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?!\w|\.\d)")


def _contradicts(norm: str, agent_said: str | None) -> bool:
    """The message gives a number where the agent's statement gave another ("88" after "line
    length 120"): it corrects a value the agent just set."""
    said = set(_NUMBER.findall((agent_said or "")[:600]))
    mine = set(_NUMBER.findall(norm[:300]))
    return bool(said and mine - said)


def _switched(norm: str, before: list[dict], after: Iterable[dict]) -> bool:
    """The agent ran next a program the message names, other than the ones it ran before, and the
    message names one of those too ("use tox, plain pytest misses the env vars"), or it gave the new
    program what it had given the old one ("use pnpm here" after ``npm install zod``, then
    ``pnpm add zod``: the same work redone with another program)."""
    named = set(_WORD.findall(norm))
    shells = [a for a in before if _is_shell(a)]
    ran = {_program(a).split(" ")[0] for a in shells}
    for a in after:
        if _is_shell(a):
            program = _program(a).split(" ")[0]
            if not program or program not in named or program in ran or program in ("git", "cd"):
                continue
            if ran & named or _arguments(a) & set().union(*(_arguments(b) for b in shells)):
                return True
    return False


def _arguments(action: dict) -> set[str]:
    """The words a shell call gave its program (not the program, its subcommand or a flag; only
    the part of a command line that runs it: ``cd app && pnpm add zod`` gives ``zod``)."""
    program = _program(action).split(" ")[0]
    for part in re.split(r"&&|\|\||[;|]", (action.get("command") or "").lower()):
        tokens = part.split()
        if tokens and tokens[0].rsplit("/", 1)[-1] == program:
            return {t for t in tokens[1:] if len(t) >= 3 and not t.startswith("-") and t not in _SUBCOMMAND_VERBS}
    return set()


_SUBCOMMAND_VERBS = frozenset("add install run exec test build start remove update upgrade list show".split())


def _is_shell(action: dict) -> bool:
    return bool(action.get("heads")) or (action.get("tool") or "").lower() in _SHELLS


def _weak_cue(norm: str, before: list[dict], interrupted: bool = False) -> str | None:
    if _YOU_DID.match(norm) or (_YOU_DID_BARE.match(norm)
                                and (_REJECTS.search(norm[:300]) or _DEAD.search(norm[:300]))):
        return "you_did"
    if _WAIT.match(norm):
        return "wait"
    dont = _DONT.match(norm) or _NO_THING.match(norm)
    if dont:
        return "dont" if before and (interrupted or _names_action(dont.group(1), before[-8:])) else None
    if _STOP.match(norm):
        return "stop"
    if _NO.match(norm):
        return "no"
    actually = _ACTUALLY.match(norm)
    if actually:
        rest = actually.group(1)
        if (not rest or _REQUEST.match(rest) or rest.rstrip().endswith("?") or _ASKS.search(rest)
                or _asks_for_more(rest)):
            return None
        return "actually"
    return None


def correction_cue(text: str, *, via: str = "message", agent_said: str | None = None,
                   actions: Iterable[dict] = (), first: bool = False, after: Iterable[dict] | None = None,
                   after_said: str | None = None, opinion: Callable[[Turn], bool] | None = None,
                   interrupted: bool = False) -> str | None:
    """The cue that makes ``text`` a correction of the agent's last action (see the module doc).

    ``agent_said``: what the agent said just before; ``actions``: its recent tool calls, oldest
    first, each ``{"tool", "heads", "command"}``; ``after``/``after_said``: its calls and first
    statement after the message (None: not known); ``first``: nothing of the agent's came before;
    ``interrupted``: the person stopped the agent just before.
    """
    return decide(Turn(text, via, agent_said, tuple(actions), None if after is None else tuple(after), after_said,
                       first, interrupted), opinion)


# --- the same correction, restated (the repeat-yourself rate) ----------------------

#: Two corrections whose terms' cosine reaches this are the same preference restated
#: (when neither names a program, or both name the same ones).
SAME_CORRECTION_COSINE = 0.5
_PROGRAMS = frozenset(
    "git npm npx yarn pnpm bun pip pip3 uv poetry conda cargo golang cmake mix iex elixir docker kubectl helm "
    "terraform pytest ruff black isort flake8 mypy eslint prettier jest vitest tsc node deno python python3 "
    "sudo brew apt apt-get bundle rake rails rspec gradle mvn dotnet gh psql mysql sqlite3 redis-cli curl wget "
    "tmux vim nano chmod sed awk grep rg ssh scp rsync venv virtualenv pipenv".split())


def correction_terms(message: str, action: dict | None = None) -> dict:
    """What a correction is about: ``corrected`` (the program, or file name, of the action it
    corrected), ``preferred`` (the programs its words name other than that one: the alternative
    the person prefers) and ``words`` (its content words)."""
    norm = _norm(message)
    corrected = None
    if action:
        tool = (action.get("tool") or "").lower()
        command = (action.get("command") or "").strip().lower()
        if tool in _SHELLS and command:
            first = [t for t in command.split() if "=" not in t and t != "sudo"][:1]
            corrected = first[0].rsplit("/", 1)[-1] if first else None
        elif command:
            corrected = command.rsplit("/", 1)[-1]
    named = {w for w in _WORD.findall(norm) if w in _PROGRAMS}
    words = {_stem(w) for w in _content(norm) if w not in _CONTRACTED}
    return {"corrected": corrected, "preferred": sorted(named - {corrected}), "words": sorted(w for w in words if w)}


#: What is left of "don't", "didn't", ... once the word pattern stops at the apostrophe.
_CONTRACTED = frozenset("don didn doesn isn wasn aren weren won wouldn shouldn couldn hasn haven hadn".split())


def _stem(word: str) -> str:
    """One form for a word's inflections ("pushing", "pushed", "pushes" -> "push"; "committed" ->
    "commit"), so that a correction restated in other words shares its words (measure 1 only: the
    rule's own reading of a message is :func:`_content`)."""
    if "." in word or "/" in word or len(word) <= 4 or word.endswith("ss"):
        return word
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            if suffix in ("ing", "ed") and len(stem) >= 4 and stem[-1] == stem[-2] and stem[-1] not in "ls":
                stem = stem[:-1]  # "committed" -> "commit", "running" -> "run"
            if suffix == "es" and not stem.endswith(("sh", "x", "ss", "z")):
                stem = word[:-1]  # "files" -> "file", not "fil"
            return stem
    return word


def _cosine(a, b) -> float:
    a, b = set(a), set(b)
    if not a or not b:
        return 0.0
    return len(a & b) / math.sqrt(len(a) * len(b))


def same_correction(a: dict, b: dict, *, threshold: float = SAME_CORRECTION_COSINE) -> bool:
    """Whether two corrections (each :func:`correction_terms`) restate the same preference.

    Corrected actions of different programs (or files): never the same. Both name an alternative
    program: the same when they name one in common ("no, use uv" after ``pip install`` and "this
    project is on uv" after another ``pip install``), different when they name none in common.
    Otherwise: the same when their content words' cosine reaches ``threshold`` and, where both
    corrected actions are known, they are the same.
    """
    if a["corrected"] and b["corrected"] and a["corrected"] != b["corrected"]:
        return False
    if a["preferred"] and b["preferred"]:
        return bool(set(a["preferred"]) & set(b["preferred"]))
    if a["corrected"] and b["corrected"] and (a["preferred"] or b["preferred"]) and _cosine(a["words"], b["words"]) > 0:
        return True  # the same program corrected, one naming the alternative, sharing words
    return _cosine(a["words"], b["words"]) >= threshold
