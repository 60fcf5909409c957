"""Facts from common self-statements ("I'm vegetarian", "I live in Lisbon"), without a model.

The offline model (a 270M *base* model) rarely extracts a fact by itself: under the facts
schema it mostly answers an empty list, or copies the prompt's examples. This extractor is
its fallback for the plain statements users make most often about themselves: name, diet,
allergies and intolerances, where they live or come from, job and employer, family (and
what a relative does, "she teaches chemistry"), pets, likes and preferences, what they play,
what they are learning, a planned move, languages, age, birthdays and other dates. It reads English
sentences in the first person with fixed patterns, so it never invents a value: every value
is a span of the message. It misses paraphrases the patterns do not cover; what it covers
and how often it is right is measured in ``bench/results/fact_extraction.md``.

Questions, negated statements ("I'm not vegan") and statements about someone else ("my
friend is vegan") give nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from agentic_memory.kinds.facts.store import MAX_SUBJECT, MAX_VALUE, ExtractedFact, FactCategory

__all__ = [
    "extract_self_statements",
    "grounded",
    "looks_like_self_statement",
    "merge_facts",
    "plausible_fact",
    "supported_fact",
]

_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december|"
    "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_DATE = (
    rf"(?:(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday),?\s+)?"
    rf"(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b(?:\s+\d{{4}})?"
    rf"|(?:{_MONTHS})\b\s+\d{{4}}"
    rf"|(?:{_MONTHS})\b\s+\d{{1,2}}(?!\d)(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?"
    rf"|\d{{4}}-\d{{2}}-\d{{2}}|\d{{1,2}}/\d{{1,2}}(?:/\d{{2,4}})?|\d{{4}})"
)
_DIETS = (
    "vegetarian|vegan|pescatarian|pescetarian|flexitarian|lacto-vegetarian|ovo-vegetarian|"
    "keto|paleo|raw vegan|fruitarian"
)
_STRICT_DIETS = (
    "halal|kosher|gluten-free|gluten free|dairy-free|dairy free|sugar-free|low-carb|low-sodium"
)
_RELATIONS = (
    "wife|husband|partner|spouse|boyfriend|girlfriend|fiancé|fiancée|fiance|fiancee|son|"
    "daughter|mother|mom|mum|father|dad|brother|sister|grandmother|grandfather|grandma|"
    "grandpa|aunt|uncle|cousin|niece|nephew|best friend|baby|kid|child"
)
_SPECIES = (
    "dog|cat|kitten|puppy|parrot|rabbit|bunny|hamster|guinea pig|horse|goldfish|fish|turtle|"
    "tortoise|snake|lizard|budgie|canary|ferret|pony|bird|golden retriever|labrador|poodle|"
    "beagle|terrier|bulldog|spaniel|husky|collie|dachshund"
)
_COUNT = r"(?:one|two|three|four|five|six|seven|eight|nine|ten|a|an|\d+)"
_FAMILY_PLURALS = {
    "kids": "children",
    "children": "children",
    "sons": "children",
    "daughters": "children",
    "kid": "children",
    "child": "children",
    "son": "children",
    "daughter": "children",
    "brothers": "siblings",
    "sisters": "siblings",
    "siblings": "siblings",
    "brother": "siblings",
    "sister": "siblings",
    "grandchildren": "grandchildren",
    "grandkids": "grandchildren",
}
# Words that can follow "I'm" capitalised without being a name.
_NOT_NAMES = frozenset(
    "i a an the so very just not also here back fine good ok okay sorry sure glad happy "
    "english american british french german spanish italian portuguese dutch swedish "
    "norwegian danish finnish polish irish scottish welsh canadian australian indian "
    "chinese japanese korean brazilian mexican russian greek turkish catholic christian "
    "muslim jewish hindu buddhist vegan vegetarian married single divorced engaged".split()
)
# Last words of a noun phrase after "I'm a" that name an occupation.
_JOB_SUFFIXES = (
    "er",
    "or",
    "ist",
    "ian",
    "ant",
    "ent",
    "ect",
    "eon",
    "ef",
    "ic",
    "ive",
    "man",
    "woman",
)
_NOT_JOBS = frozenset(
    "fan lover bit little lot member user beginner believer vegetarian vegan pescatarian "
    "parent mother father mom dad morning night person smoker drinker eater sleeper "
    "runner-up".split()
)
_NOT_ANTECEDENTS = frozenset("i i'm im it they we you he she this that there".split())
# Each trailing word after its own separator (start, a comma or spaces): "\s*,?\s*" could
# split a run of spaces many ways, and "I play now now ... now x" took time doubling per word.
_TRAILING = re.compile(
    r"(?:(?:^|\s*,\s*|\s+)\b(?:by the way|btw|originally|actually|now|too|as well|these days|"
    r"last (?:year|month|week)|this year|for (?:\w+ )?(?:years?|months?|weeks?)|"
    r"since \w+(?: \d{4})?|right now|at the moment|currently|though|only))+\s*$",
    re.IGNORECASE,
)
_CLAUSE_SPLIT = re.compile(
    r"(?<=[.!;])\s+|\s*\n+\s*|,\s+(?:and|but|so)\s+|\s+(?:and|but)\s+(?=(?:i|my|we|our)\b)|,\s+(?=(?:i|my|we|our)\b)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[\s.!,;:]+$")


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    build: Callable[[re.Match[str], str], tuple[str, str, FactCategory] | None]


def _clean(value: str) -> str:
    # A value is cut to MAX_VALUE when stored: what lies past twice that is never kept, and
    # each trailing-word pass below costs the length of what it reads.
    text = _SENTENCE_END.sub("", value.strip()[: 2 * MAX_VALUE])
    previous = None
    while previous != text:
        previous = text
        text = _TRAILING.sub("", text).strip()
        text = _SENTENCE_END.sub("", text)
    return " ".join(text.split())


def _cut_clause(value: str) -> str:
    """Cut a value at the first word that starts another clause (so, because, which...)."""
    parts = re.split(
        r"\s+(?:so|because|since|which|who|but|although|when|while|if|and i|and my)\b",
        value,
        maxsplit=1,
        flags=re.IGNORECASE,
    )
    return parts[0]


# A given name: a capital (ASCII, Latin-1 or Latin Extended-A, so "Inês", "Zoë" and "Łukasz"
# stay whole) and then letters; ASCII alone cut "Inês" to "In".
_NAME = r"[A-ZÀ-ÖØ-ÞĀ-Ž][^\W\d_]+"


def _p(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _name(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    name = _clean(match.group("name"))
    words = name.split()
    if not words or len(words) > 3 or words[0].lower() in _NOT_NAMES:
        return None
    if not all(w[:1].isupper() for w in words):
        return None
    return "name", name, "identity"


def _capital_name(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    # "I'm Tom", "I'm Tom Nowak": only capitalised words, none a nationality, a diet, an
    # adjective ("I'm Polish", "I'm Vegan Now" state no name).
    name = match.group("name")
    if any(w.lower() in _NOT_NAMES for w in name.split()):
        return None
    return "name", name, "identity"


def _diet_fact(value: str) -> tuple[str, str, FactCategory]:
    strict = re.search(_STRICT_DIETS, value, re.IGNORECASE) is not None
    return "diet", value, "constraint" if strict else "preference"


def _diet(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    return _diet_fact(match.group("diet").lower())


def _diet_phrase(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    value = _clean(_cut_clause(match.group("diet")))
    return _diet_fact(value) if value else None


def _avoid(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    thing = _clean(_cut_clause(match.group("thing")))
    if not thing:
        return None
    verb = match.group("verb").lower()
    subject = "drinks to avoid" if verb == "drink" else "food to avoid"
    return subject, f"does not {verb} {thing}", "constraint"


def _allergy(match: re.Match[str], before: str) -> tuple[str, str, FactCategory] | None:
    thing = _clean(_cut_clause(match.group("thing")))
    if thing.lower() in ("them", "it", "those", "these", "that", "this"):
        thing = _antecedent(before)
    if not thing:
        return None
    return f"{thing.lower()} allergy", f"allergic to {thing}", "constraint"


def _antecedent(before: str) -> str:
    """Return the noun a pronoun refers to: the first word before it, if it is a noun."""
    head = re.match(r"\s*(?:the\s+|my\s+)?([A-Za-z][a-z-]+)", before)
    if head is None or head.group(1).lower() in _NOT_ANTECEDENTS:
        return ""
    return head.group(1).lower()


def _intolerance(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    thing = match.group("thing").lower()
    return f"{thing} intolerance", f"{thing} intolerant", "constraint"


def _health(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    return "health condition", match.group("condition").lower(), "constraint"


def _place(subject: str) -> Callable[[re.Match[str], str], tuple[str, str, FactCategory] | None]:
    def build(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
        # "in Gdansk with my wife Ola": who the user lives with is not part of the place.
        place = _clean(re.split(r"\s+with\b", _cut_clause(match.group("place")), maxsplit=1)[0])
        if not place or not any(w[:1].isupper() for w in place.split()):
            return None  # "I live in a flat": not a place name
        return subject, place, "identity"

    return build


def _job_as(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    job = _clean(_cut_clause(match.group("job")))
    return ("job", job, "identity") if job else None


def _job_noun(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    phrase = _clean(_cut_clause(match.group("job")))
    head = re.split(r"\s+(?:at|in|for|with|from|of)\s+", phrase, maxsplit=1, flags=re.IGNORECASE)
    last = head[0].split()[-1].lower() if head[0].split() else ""
    if not last or last in _NOT_JOBS or re.fullmatch(_DIETS, last, re.IGNORECASE):
        return None
    if not last.endswith(_JOB_SUFFIXES) and last not in ("chef", "nurse", "student", "judge"):
        return None
    return "job", phrase, "identity"


def _employer(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    employer = _clean(_cut_clause(match.group("employer")))
    return ("employer", employer, "identity") if employer else None


def _teach(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    what = _clean(_cut_clause(match.group("what")))
    return ("job", f"teaches {what}", "identity") if what else None


def _count(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    noun = match.group("noun").lower()
    count = match.group("count").lower()
    value = f"{count} {noun}"
    subject = _FAMILY_PLURALS.get(noun)
    if subject is None:
        singular = noun[:-1] if noun.endswith("s") else noun
        if re.fullmatch(_SPECIES, singular, re.IGNORECASE) is None:
            return None
        subject = "pets"
    return subject, value, "other"


def _relation(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    relation = match.group("rel").lower()
    value = _clean(_cut_clause(match.group("value")))
    if not value:
        return None
    return relation, value, "other"


def _relation_name(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    relation = match.group("rel").lower()
    name = match.group("name")
    return f"{relation}'s name", name, "other"


def _pet(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    species = match.group("species").lower()
    return f"pet {species}", match.group("name"), "other"


_NOT_PLAYED = frozenset(
    "it that this them these those with along around by fair well badly fast quickly so too "
    "from".split()
)
"""First words after "I play" / "I'm learning" that name no instrument, sport or subject."""


def _pet_breed(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    # "My dog is a beagle called Pixel": the name is the fact, the breed says which dog.
    species = match.group("species").lower()
    breed = " ".join(match.group("breed").lower().split())
    return f"pet {species}", f"{match.group('name')}, a {breed}", "other"


def _relation_pronoun(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    # "My partner's name is Ola and she teaches chemistry": "she" is the partner.
    value = _clean(_cut_clause(match.group("value")))
    return (match.group("rel").lower(), value, "other") if value else None


def _plays(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    thing = _clean(_cut_clause(match.group("thing")))
    head = re.split(r"\s+(?:in|on|at|with|for|every|during|since)\s+", thing, maxsplit=1)[0]
    head = re.sub(r"^(?:the|a|an)\s+", "", head, flags=re.IGNORECASE).lower()
    words = head.split()
    if not words or words[0] in _NOT_PLAYED or words[-1] in ("role", "part", "games"):
        return None  # "I play a big role": no instrument or sport
    return f"plays: {head}", f"plays {thing}", "preference"


def _learning(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    thing = _clean(_cut_clause(match.group("thing")))
    head = re.split(r"\s+(?:in|on|at|with|for|every|from|since)\s+", thing, maxsplit=1)[0]
    if not head or head.lower().split()[0] in _NOT_PLAYED or head.lower().startswith("a lot"):
        return None
    return f"learning: {head.lower()}", f"learning {thing}", "other"


def _moving(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    place = _clean(_cut_clause(match.group("place")))
    if not place or not any(w[:1].isupper() for w in place.split()):
        return None  # "we're moving to a bigger flat": not a place name
    if re.match(r"\S+ v?\d", place):
        return None  # "we're moving to Python 3", "to Java 21": a version, not a place
    return "planned move", f"moving to {place}", "other"


def _marital(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    return "marital status", match.group("status").lower(), "identity"


def _favourite(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    what = " ".join(match.group("what").lower().split())
    value = _clean(_cut_clause(match.group("value")))
    if not value:
        return None
    return f"favourite {what}", value, "preference"


_ANSWERS = re.compile(r"\b(?:answers?|replies|responses)\b", re.IGNORECASE)
_FORM = re.compile(
    r"\b(?:short(?:er)?|brief|concise|detailed|long(?:er)?|simple|bullet(?:ed)?|lists?)\b",
    re.IGNORECASE,
)
"""How long or how laid out an answer is: the answer style ("replies in Portuguese" is not)."""


def _prefer(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    choice = _clean(_cut_clause(match.group("choice")))
    other = match.group("other")
    if not choice:
        return None
    if other:
        other = _clean(_cut_clause(other))
        return f"preference: {choice} or {other}", f"{choice} over {other}", "preference"
    if _ANSWERS.search(choice) and _FORM.search(choice):
        # One answer style at a time: "keep answers short" later supersedes it.
        return "answer style", choice, "preference"
    head = re.split(r"\s+(?:when|if|for|on|at|in)\s+", choice, maxsplit=1)[0]
    return f"preference: {head}", choice, "preference"


def _like(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    thing = _clean(_cut_clause(match.group("thing")))
    if not thing or thing.lower() in ("it", "that", "this", "you", "them"):
        return None
    verb = match.group("verb").lower()
    negative = verb in ("hate", "dislike", "can't stand", "cannot stand", "detest")
    head = re.split(r"\s+(?:on|at|in|with|when|every|during)\s+", thing, maxsplit=1)[0]
    subject = f"{'dislikes' if negative else 'likes'}: {head.lower()}"
    return subject, thing, "preference"


def _answers(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    return "answer style", f"{match.group('style').lower()} answers", "preference"


def _languages(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    value = _clean(_cut_clause(match.group("langs")))
    if not value or not value[:1].isupper():
        return None
    return "languages", value, "identity"


def _age(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    age = int(match.group("age"))
    return ("age", str(age), "identity") if 0 < age < 125 else None


def _birth(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    return "birth date", _clean(match.group("date")), "identity"


def _date_of(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    thing = " ".join(match.group("thing").lower().split())
    verb = match.group("verb").lower()
    date = _clean(match.group("date"))
    if verb.startswith("expire"):
        return f"{thing} expiry", date, "other"
    if verb.startswith("is due") or verb.startswith("due"):
        return f"{thing} deadline", date, "constraint"
    return thing, date, "other"


def _trip(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    place = _clean(_cut_clause(match.group("place")))
    if not place or not any(w[:1].isupper() for w in place.split()):
        return None  # "I'm going to bed": not a place name
    when = match.group("when")
    value = f"{match.group('verb').lower()} to {place}"
    if when:
        when = _clean(when)
        value = f"{value} {when[:1].lower()}{when[1:]}"  # "In March" leads the sentence
    return "trip", value, "other"


def _start(match: re.Match[str], _: str) -> tuple[str, str, FactCategory] | None:
    thing = " ".join(match.group("thing").lower().split())
    return f"{thing} start date", _clean(match.group("date")), "other"


_I_AM = r"(?:i'm|i am|im|i’m)"
_I_HAVE = r"(?:i have|i've got|i’ve got|i have got|we have|we've got|i've|we’ve got)"
_PATTERNS: tuple[_Pattern, ...] = (
    _Pattern(_p(r"\bmy name is (?P<name>[^,.!;]+)"), _name),
    _Pattern(_p(r"\bname's (?P<name>[^,.!;]+)"), _name),
    _Pattern(_p(r"\b(?:you can |please )?call me (?P<name>[^,.!;]+)"), _name),
    _Pattern(_p(r"\b(?:everyone|people|friends) calls? me (?P<name>[^,.!;]+)"), _name),
    _Pattern(
        re.compile(
            rf"(?i:^(?:hi|hello|hey)?[,!]?\s*{_I_AM}\s+)(?P<name>{_NAME}(?: {_NAME})?)\s*(?:[,.!]|$)"
        ),
        _capital_name,
    ),
    _Pattern(
        _p(
            rf"\b{_I_AM} (?:a |an )?(?:strict |committed |lifelong )?(?P<diet>{_DIETS}|{_STRICT_DIETS})\b"
        ),
        _diet,
    ),
    _Pattern(_p(rf"\b(?:i've been|i have been|i’ve been) (?:a |an )?(?P<diet>{_DIETS})\b"), _diet),
    _Pattern(
        _p(r"\bi (?:follow|am on|'m on|eat|keep) (?:a |an )?(?P<diet>[\w -]+?) diet\b"),
        _diet_phrase,
    ),
    _Pattern(_p(rf"\bi (?:only )?eat (?P<diet>{_STRICT_DIETS})\b"), _diet),
    _Pattern(
        _p(r"\bi (?:don't|do not|never|can't|cannot) (?P<verb>eat|drink) (?P<thing>[^,.!;]+)"),
        _avoid,
    ),
    _Pattern(
        _p(
            rf"\b(?:{_I_AM}|and|also|but) (?:also )?(?:severely |very |deathly |mildly )?allergic to (?P<thing>[^,.!;]+)"
        ),
        _allergy,
    ),
    _Pattern(
        _p(
            r"\bi have (?:a |an )?(?:severe |bad |mild |serious )?(?P<thing>[\w-]+(?: [\w-]+)?) allergy\b"
        ),
        _allergy,
    ),
    _Pattern(
        _p(rf"\b{_I_AM} (?P<thing>lactose|gluten|fructose|histamine) intolerant\b"), _intolerance
    ),
    _Pattern(
        _p(rf"\b{_I_AM} (?P<condition>diabetic|epileptic|asthmatic|pregnant|celiac|coeliac)\b"),
        _health,
    ),
    _Pattern(_p(r"\b(?:i|we) (?:live|reside) in (?P<place>[^,.!;]+)"), _place("city")),
    _Pattern(
        _p(rf"\b{_I_AM} (?:currently )?(?:living|based|staying) in (?P<place>[^,.!;]+)"),
        _place("city"),
    ),
    _Pattern(_p(r"\b(?:i|we) (?:just |recently )?moved to (?P<place>[^,.!;]+)"), _place("city")),
    _Pattern(_p(rf"\b{_I_AM} (?:originally )?from (?P<place>[^,.!;]+)"), _place("hometown")),
    _Pattern(_p(r"\bi (?:grew up|was raised) in (?P<place>[^,.!;]+)"), _place("hometown")),
    _Pattern(
        re.compile(
            rf"(?i:\b(?P<when>next (?:week|month|year|summer|winter|spring|autumn)|in (?:{_MONTHS})\b|this (?:week|month|summer|winter|spring|autumn|weekend))?,?\s*{_I_AM} (?:going to be )?(?P<verb>flying|going|travell?ing|heading|driving|off)(?: on a trip| on holiday| on vacation)? to )(?P<place>[^,.!;]+)"
        ),
        _trip,
    ),
    _Pattern(_p(r"\bi work as (?:a |an )?(?P<job>[^,.!;]+)"), _job_as),
    _Pattern(_p(r"\bmy (?:job|profession|occupation) is (?:a |an )?(?P<job>[^,.!;]+)"), _job_as),
    _Pattern(_p(r"\bi work (?:at|for) (?P<employer>[^,.!;]+)"), _employer),
    _Pattern(_p(r"\bi teach (?P<what>[^,.!;]+)"), _teach),
    _Pattern(_p(rf"\b{_I_AM} (?:a |an )(?P<job>[^,.!;]+)"), _job_noun),
    _Pattern(_p(rf"\b{_I_AM} (?P<status>married|single|divorced|engaged|widowed)\b"), _marital),
    _Pattern(_p(rf"\b{_I_HAVE} (?P<count>{_COUNT}) (?P<noun>[a-z]+)\b(?! named| called)"), _count),
    _Pattern(
        _p(
            rf"\b(?:{_I_HAVE}|we adopted|i adopted|we got|i got) (?:a |an )(?:\w+ )?(?P<species>{_SPECIES}) (?:named|called) (?P<name>{_NAME})"
        ),
        _pet,
    ),
    _Pattern(
        _p(rf"\bmy (?P<species>{_SPECIES})(?:'s name is| is (?:called|named)) (?P<name>{_NAME})"),
        _pet,
    ),
    _Pattern(
        _p(
            rf"\bmy (?P<species>{_SPECIES}) is (?:a |an )(?P<breed>[a-z]+(?: [a-z]+)?) (?:named|called) (?P<name>{_NAME})"
        ),
        _pet_breed,
    ),
    _Pattern(
        _p(rf"\bmy (?P<rel>{_RELATIONS})(?:'s name is| is (?:called|named)) (?P<name>{_NAME})"),
        _relation_name,
    ),
    _Pattern(re.compile(rf"(?i:\bmy (?P<rel>{_RELATIONS}),?) (?P<name>{_NAME})\b"), _relation_name),
    _Pattern(
        _p(r"\bmy (?:favourite|favorite) (?P<what>[a-z]+(?: [a-z]+)?) is (?P<value>[^,.!;]+)"),
        _favourite,
    ),
    _Pattern(
        _p(
            r"\bi (?:really |much |strongly )?prefer (?P<choice>[^,.!;]+?)(?: (?:over|to|rather than) (?P<other>[^,.!;]+))?(?=[,.!;]|$)"
        ),
        _prefer,
    ),
    _Pattern(
        _p(
            r"\b(?:please )?keep (?:your |the )?(?:answers?|replies|responses) (?P<style>short|brief|concise|detailed|simple)\b"
        ),
        _answers,
    ),
    _Pattern(
        _p(
            r"\bi (?:really )?(?P<verb>love|like|enjoy|adore|hate|dislike|can't stand|cannot stand|detest) (?P<thing>[^,.!;]+)"
        ),
        _like,
    ),
    _Pattern(_p(r"\bi speak (?P<langs>[^,.!;]+)"), _languages),
    _Pattern(_p(r"\bi (?:play|have played) (?P<thing>[^,.!;:]+)"), _plays),
    _Pattern(_p(rf"\b{_I_AM} (?:currently )?learning (?P<thing>[^,.!;:]+)"), _learning),
    _Pattern(
        _p(
            rf"\b(?:{_I_AM}|we're|we are|we’re) (?:going to be )?(?:moving|relocating) to (?P<place>[^,.!;]+)"
        ),
        _moving,
    ),
    _Pattern(
        _p(
            rf"\b{_I_AM} (?P<age>\d{{1,3}})(?: years? old| y/?o)?\b(?!\s*(?:%|percent|kg|km|cm|minutes|hours))"
        ),
        _age,
    ),
    _Pattern(_p(rf"\bi was born (?:on |in )?(?P<date>{_DATE})"), _birth),
    _Pattern(
        _p(
            rf"\b(?:my|our) (?P<thing>[a-z]+(?: [a-z']+)?) (?P<verb>is due|is|expires|falls|starts|ends) (?:on |in |by )?(?P<date>{_DATE})"
        ),
        _date_of,
    ),
    _Pattern(
        _p(rf"\bi start (?:my )?(?P<thing>[a-z]+(?: [a-z]+)?) (?:on |in )(?P<date>{_DATE})"), _start
    ),
    _Pattern(
        _p(
            rf"\bmy (?P<rel>{_RELATIONS}) (?P<value>(?:lives|works|teaches|studies|is(?! called| named)) [^,.!;]+)"
        ),
        _relation,
    ),
    _Pattern(
        _p(
            rf"\bmy (?P<rel>{_RELATIONS})(?:'s name is| is (?:called|named))? (?:{_NAME} )?and (?:she|he|they) (?P<value>(?:lives|works|teaches|studies|runs|owns|is(?! called| named)) [^,.!;:]+)"
        ),
        _relation_pronoun,
    ),
)

_SELF = re.compile(r"\b(?:i|i'm|i am|i've|im|my|me|we|our|i’m|i’ve)\b", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not|no longer|never been|isn't|aren't|wasn't)\b", re.IGNORECASE)


def _clauses(text: str) -> Iterator[tuple[str, str]]:
    """Yield (the sentence's earlier clauses, a clause) for every clause of a statement."""
    for sentence in re.split(r"(?<=[.!?])\s+|\n+", text):
        stripped = sentence.strip()
        if not stripped or stripped.endswith("?"):
            continue  # a question states nothing
        before = ""
        for clause in _CLAUSE_SPLIT.split(stripped):
            if clause and clause.strip():
                yield before, clause.strip()
                before = f"{before} {clause.strip()}".strip()


def looks_like_self_statement(text: str) -> bool:
    """Tell whether a message says something in the first person that is not a question.

    Args:
        text: A user message.

    Returns:
        True when at least one sentence speaks of the user (I, my, we, our) and is not a
        question.
    """
    return any(_SELF.search(clause) for _, clause in _clauses(text))


def extract_self_statements(text: str) -> list[ExtractedFact]:
    """Extract facts from the common self-statements of a message, inventing nothing.

    Args:
        text: A user message.

    Returns:
        The facts found, first mention of each subject first; an empty list for questions,
        requests and statements about someone else.
    """
    found: dict[str, ExtractedFact] = {}
    for before, clause in _clauses(text):
        if _NEGATION.search(clause) and not re.search(
            r"\b(?:don't|do not|never|can't|cannot) (?:eat|drink)\b", clause, re.IGNORECASE
        ):
            continue
        for pattern in _PATTERNS:
            for match in pattern.regex.finditer(clause):
                # What precedes the match in its sentence (earlier clauses included), for
                # a pronoun's antecedent ("Cats make me sneeze, I'm allergic to them").
                built = pattern.build(match, f"{before} {clause[: match.start()]}".strip())
                if built is None:
                    continue
                subject, value, category = built
                subject = " ".join(subject.split())[:MAX_SUBJECT].strip()
                value = " ".join(value.split())[:MAX_VALUE].strip()
                if subject and value and subject not in found:
                    found[subject] = ExtractedFact(subject=subject, value=value, category=category)
    return list(found.values())


_GROUND_WORD = re.compile(r"[a-z0-9]+")
_FILLER = frozenset(
    "a an the and or of to in on at for with is am are was be user user's their they "
    "them he she his her has have does not no likes loves prefers".split()
)


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def grounded(value: str, message: str) -> bool:
    """Tell whether a fact's value is taken from the message (not invented, not copied).

    Every word of the value, other than filler words and plural endings, must occur in the
    message. A small model's facts are kept only when grounded: a value it made up, or
    copied from the prompt's examples ("vegetarian", "allergic to peanuts"), is not.

    Args:
        value: The fact's value.
        message: The user message it was extracted from.
    """
    said = {_stem(w) for w in _GROUND_WORD.findall(message.lower())}
    words = [_stem(w) for w in _GROUND_WORD.findall(value.lower()) if w not in _FILLER]
    return bool(words) and all(w in said for w in words)


_MAX_SUBJECT_WORDS = 4


def plausible_fact(fact: ExtractedFact, message: str) -> bool:
    """Tell whether a small model's fact is one: a short key and a value taken from the message.

    Refused: a value not :func:`grounded` in the message; a subject of more than four words
    (a sentence, not a key); a subject that says the same as the value; a value that is the
    whole message (the base model's favourite answer: the message copied into both fields).

    Args:
        fact: A fact the model extracted.
        message: The user message.
    """
    if not grounded(fact.value, message):
        return False
    subject = _GROUND_WORD.findall(fact.subject.lower())
    value = _GROUND_WORD.findall(fact.value.lower())
    said = _GROUND_WORD.findall(message.lower())
    if not subject or len(subject) > _MAX_SUBJECT_WORDS or subject == value:
        return False
    return not (len(said) > 3 and len(value) >= 0.8 * len(said))


def supported_fact(fact: ExtractedFact, message: str, prompt: str = "") -> bool:
    """Tell whether a capable model's fact is supported by the message it came from.

    A capable model may put what the user said in its own words ("I don't eat meat" ->
    food to avoid: meat), so its value need not be a span of the message. But a message
    that states nothing about the user in the first person (a question, a request) supports
    no fact that is not in it, and a value made only of the extraction prompt's own words
    (its examples: "vegetarian", "allergic to peanuts") that the message does not hold is a
    copy of the prompt, not something the user said.

    Args:
        fact: A fact the model extracted.
        message: The user message.
        prompt: The extraction prompt's fixed text (its examples).
    """
    if grounded(fact.value, message):
        return True
    if not looks_like_self_statement(message):
        return False
    return not grounded(fact.value, prompt)


def merge_facts(first: list[ExtractedFact], second: list[ExtractedFact]) -> list[ExtractedFact]:
    """Join two lists of facts; one of ``second`` is dropped when its subject or value is taken.

    Args:
        first: The facts that win (e.g. those read from self-statements).
        second: More facts (e.g. the model's), kept when they add a subject and a value.
    """
    subjects = {" ".join(f.subject.lower().split()) for f in first}
    values = {" ".join(f.value.lower().split()) for f in first}
    out = list(first)
    for fact in second:
        subject = " ".join(fact.subject.lower().split())
        value = " ".join(fact.value.lower().split())
        if subject in subjects or value in values:
            continue
        subjects.add(subject)
        values.add(value)
        out.append(fact)
    return out
