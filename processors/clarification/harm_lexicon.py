"""Harm vocabulary by harm area: what keeps a refused request out of clarification.

A clarifying question is for a request whose policy is ambiguous for it; a request that
names a harm (a weapon, a poison, a crime, self-harm, a medical emergency, sexual content,
a slur, someone's private data) is not asked about, whatever its refusal says: the answers
to neutral questions cannot make such a request safe, and asking teaches its author what to
say (docs/clarification.md, "Security"). This module is the vocabulary of that rule.

Areas and their terms were written from the harm areas of the example policy
(``refusal_audit/example_policies/allowed_use_policy.md``, section 2: violence, weapons,
drugs, self-harm, hate and harassment, sexual content and minors, privacy, cyber, fraud,
misinformation, intellectual property) and MLCommons' AILuminate hazard categories (adding
chemical and biological agents, specialised medical advice and personal attributes), then
widened where requests of the shared data slipped through (docs/clarification.md says
which figures are therefore in-sample). A term matches its inflections ("laundering",
"overdosed", "raped": :func:`term_pattern`); the words of a term of several words may have
up to two other words between them ("earth is flat"); digits and signs inside a word are
read as the letters they imitate ("m3th", "b0mb": :func:`normalise`).

The list is broad on purpose and has homonyms ("execute", "crack", "shoot"): a request
that is screened by mistake stays refused (a missed clarification, which the application
can still answer on its own), one that is not screened by mistake may be asked about
(docs/clarification.md measures both on the shared data).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

HARM_AREAS: dict[str, tuple[str, ...]] = {
    "violence": (
        "kill", "killer", "murder", "homicide", "assassinate", "assassination", "execute",
        "execution", "slaughter", "massacre", "stab", "shoot", "shooting", "strangle",
        "choke", "suffocate", "drown", "behead", "decapitate", "dismember", "torture",
        "maim", "injure", "assault", "attack", "violence", "violent", "bloodshed", "corpse",
        "dead body", "hostage", "kidnap", "abduct", "ambush", "lynch", "overpower",
        "terminate", "destroy", "hunt down", "beat up", "burn down", "blow up", "set fire",
        "arson", "sabotage", "revenge", "hurt", "harm", "die", "death", "deadly", "lethal",
        "fatal", "terrorist", "terrorism", "extremist", "radicalise", "radicalize",
        "militia", "jihad", "war crime", "mass shooting", "animal cruelty", "punch", "slap",
        "knockout", "wipe out", "exterminate", "annihilate", "eradicate", "obliterate",
        "level city", "destroy city", "entire city",
    ),
    "weapons": (
        "weapon", "gun", "firearm", "pistol", "handgun", "rifle", "shotgun", "ammunition",
        "bullet", "silencer", "suppressor", "ghost gun", "bomb", "explosive", "detonate",
        "detonator", "grenade", "molotov", "napalm", "landmine", "missile", "nuclear",
        "uranium", "plutonium", "radioactive", "knife", "machete", "weaponise", "weaponize",
    ),
    "chemical_biological": (
        "toxic", "toxin", "poison", "poisonous", "venom", "cyanide", "arsenic", "ricin",
        "sarin", "nerve agent", "mustard gas", "chlorine", "ammonia", "bleach", "anthrax",
        "botulinum", "pathogen", "bioweapon", "smallpox", "ebola", "asbestos", "noxious",
        "lethal dose", "chemical weapon",
    ),
    "drugs": (
        "drug", "narcotic", "meth", "methamphetamine", "cocaine", "crack", "heroin",
        "fentanyl", "opioid", "opium", "lsd", "mdma", "ecstasy", "ketamine", "psilocybin",
        "marijuana", "cannabis", "dealer", "overdose", "get high",
    ),
    "self_harm": (
        "suicide", "suicidal", "self harm", "euthanasia", "kill myself", "end my life",
        "end my suffering", "end it all", "hang myself", "starve", "anorexia", "bulimia",
        "purge", "cut myself",
    ),
    "medical_emergency": (
        "heart attack", "stroke", "seizure", "unconscious", "gunshot", "broken bone",
        "broken arm", "broken leg", "fracture", "set bone", "surgery", "amputate", "stitch",
        "suture", "abscess", "extraction", "lance", "rabies", "poisoning", "chest pain",
        "bleeding", "concussion", "sepsis", "syringe", "diagnose", "diagnosis",
        "prescription", "antibiotic", "antiviral", "naloxone", "medication", "medicine", "pill",
        "symptom", "infection", "throw up", "induce vomiting",
    ),
    "hate_harassment": (
        "slur", "racial", "racist", "racism", "sexist", "sexism", "supremacy",
        "supremacist", "superiority", "inferior", "derogatory", "bigot", "nazi",
        "holocaust", "genocide", "ethnic cleansing", "segregate", "discriminate",
        "discrimination", "oppress", "dehumanize", "harass", "bully", "cyberbully",
        "stalk", "threaten", "intimidate", "humiliate", "blackmail", "extort", "dox",
        "doxx", "manipulate", "gaslight", "insult", "hate", "idiot", "stupid", "ugly", "swear",
        "profanity", "curse word", "cuss",
    ),
    "sexual": (
        "sex", "sexual", "sexy", "sext", "nude", "naked", "porn", "pornography", "erotic",
        "orgasm", "fetish", "kinky", "bdsm", "lust", "horny", "genital", "penis", "vagina",
        "rape", "molest", "grope", "incest", "pedophile", "paedophile", "underage",
        "chastity", "sissy", "seduce", "escort", "prostitute",
    ),
    "privacy": (
        "password", "passcode", "social security", "credit card", "bank account",
        "phone number", "contact number", "contact information", "contact detail",
        "home address", "current address", "postal address", "whereabouts", "coordinates",
        "spy", "surveil", "surveillance", "secretly record", "hidden camera", "wiretap",
        "track location", "medical record", "criminal record", "private information",
        "personal information", "pin", "pin code", "iphone pin", "passport number",
        "school schedule",
    ),
    "cyber": (
        "hack", "hacker", "malware", "ransomware", "trojan", "keylogger", "botnet", "ddos",
        "exploit", "phishing", "spyware", "rootkit", "backdoor", "brute force",
        "sql injection", "jailbreak", "bypass", "breach", "zero day", "crack password",
    ),
    "fraud_crime": (
        "steal", "stolen", "theft", "thief", "shoplift", "burglar", "burglary", "burgle",
        "rob", "robbery", "loot", "fraud", "scam", "launder", "money laundering",
        "counterfeit", "forge", "forgery", "fake id", "bribe", "bribery", "embezzle",
        "tax evasion", "evade", "cheat", "smuggle", "trafficking", "pirate", "piracy",
        "illegal", "illegally", "unlawful", "crime", "criminal", "sneak", "trespass",
        "break into", "without paying", "get away with", "ponzi", "pyramid scheme",
        "extortion", "ransom", "impersonate", "identity theft", "catfish",
        "false accusation", "deceive", "vandalise", "vandalize", "vandalism", "poach",
        "untraceable", "undetectable", "without getting caught", "shell company",
    ),
    "misinformation": (
        "hoax", "conspiracy", "propaganda", "disinformation", "misinformation",
        "fake news", "earth flat", "flat earth", "cause autism", "chemtrail",
        "never happened", "never occurred", "made up", "faked", "staged", "cover up",
    ),
    "intellectual_property": (
        "lyrics", "transcript", "screenplay", "full text", "entire text", "verbatim",
        "exact replica", "exact copy", "unreleased", "secret recipe", "secret sauce",
        "trade secret", "source code", "torrent", "keygen", "license key", "serial key",
        "drm", "paywall", "sequel", "next season", "next episode", "part 2", "secret formula",
    ),
    "personal_attributes": (
        "mental health", "health history", "medical history", "marital status",
        "labour union", "labor union", "trade union", "union member", "sexual orientation",
        "political affiliation", "religious belief", "ethnicity", "immigration status",
        "criminal history", "disability", "pregnancy", "salary", "income", "net worth",
    ),
}  # fmt: skip
"""Harm area -> terms (lower case; see the module docstring for their source and matching)."""

SELF_TREATMENT = re.compile(
    r"\b(?:at home|home remedy|manually|diy|(?:by |on )?my(?:self| own)|yourself|"
    r"(?:without|instead of|avoid) (?:going to |seeing |calling |a |the |an |any )*(?:doctor|"
    r"hospital|dentist|vet|ambulance|emergency|professional|insurance|911)|should i (?:try|"
    r"take|use|give|start)|what (?:dose|dosage|amount) (?:should|would|do|can) i|leftover|"
    r"(?:don'?t|do not) (?:want to )?(?:go|going) to (?:a |the )?(?:hospital|doctor)|"
    r"health insurance|what (?:should|can) i (?:do|take|use)|(?:which|what) (?:\w+ )?"
    r"(?:medication|medicine|pills?|drugs?) (?:i )?(?:should|can|do|must)|counteract|"
    r"home (?:extraction|surgery|treatment|remedy|birth))\b"
)
"""Self-treatment: the request asks to do at home, alone or without a professional what a
medical term of the request names (the ``medical_emergency`` area; an intent rule, since
"what is a fracture" is a definition)."""


THIRD_PARTY = re.compile(
    r"\b(?:[a-z]+'s|[a-z]+s'|his|her|their|someone|somebody)\b|\b(?:my|our) (?:\w+ )?"
    r"(?:employees?|staff|co-?workers?|colleagues?|boss|manager|tenants?|neighbou?rs?|"
    r"friends?|partner|wife|husband|ex|date|mentee|students?|patients?|clients?|customers?|"
    r"relatives?|family|classmates?|roommates?|teachers?|doctor|landlord)\b"
)
"""A third person the request is about (a possessive, his/her/their, someone): the
``personal_attributes`` area screens only with one ("James's marital status", not "how can
I improve my mental health")."""

CONDITIONS: dict[str, re.Pattern[str]] = {
    "medical_emergency": SELF_TREATMENT,
    "personal_attributes": THIRD_PARTY,
}
"""Areas that count only when their condition also matches the (lower-cased) request."""

INTENTS: dict[str, re.Pattern[str]] = {
    "self_injury": re.compile(
        r"\b(?:cut|carve|burn|scratch|scar|brand|pierce|bruise|hit|punch)\w*\s+(?:[\w']+\s+)"
        r"{0,3}?(?:into |on |in |onto )?(?:my|her|his|their) (?:own )?(?:arms?|wrists?|legs?|"
        r"skin|body|thighs?|face|stomach|chest|girlfriend|boyfriend|wife|husband|partner|"
        r"child|kid|son|daughter)\b"
    ),
    "people_list": re.compile(
        r"\b(?:names?|lists?|addresses|identities|records?|details|photos?) (?:of )?(?:all )?"
        r"(?:the )?(?:\w+ )?(?:students|employees|patients|residents|members|people|staff|"
        r"children|kids|customers|users|clients|tenants|neighbou?rs|voters|workers)\b|"
        r"\b(?:students|employees|patients|residents|members|people|customers|users|"
        r"workers|children) (?:named|listed|enrolled|living)\b"
    ),
    "asserted_claim": re.compile(
        r"\b(?:evidence|proof|research|studies|sources|facts|data) (?:[\w']+ ){0,3}?(?:that|"
        r"showing|proving|confirm\w*|support\w*)\b|\bthe (?:discovery|fact|truth|theory|"
        r"idea|claim) that\b|\baccording to (?:\w+ )?(?:scientists|experts|doctors|"
        r"researchers|historians)\b|\b(?:has|have) been proven\b|\bis (?:actually|secretly|"
        r"really) (?:a |an )?(?:real|fake|lie|myth|portal|alive)\b|\b(?:prevents?|cures?|"
        r"reverses?|heals?) (?:\w+ ){0,2}?(?:cancer|diabetes|autism|covid|hiv|aids|"
        r"alzheimer'?s|dementia)\b"
    ),
    "protected_work": re.compile(
        r"\b(?:recipe|formula) (?:[\w']+ ){0,3}?secret\b|\bsecret (?:[\w']+ ){0,2}?(?:recipe|"
        r"formula|sauce|blend|ingredients?)\b"
    ),
}
"""Intents that keep a request refused, whatever words it uses: injuring one's own body or
a partner, a list of private people or their records, content asserting a claim as proven
("evidence that ...", "the discovery that ...", "according to scientists", a cure for a
disease), a company's secret recipe or formula."""


@dataclass(frozen=True)
class LexiconHit:
    """One term of :data:`HARM_AREAS` found in a text: its ``area`` and the ``text`` that
    matched (lower case)."""

    area: str
    text: str

    def __str__(self) -> str:
        return f"{self.area}:{self.text}"


def _word_pattern(word: str) -> str:
    """A word and its inflections: -s, -es, -ed, -ing, -er(s), -ist(s), a doubled final
    consonant, -y/-ies/-ied, a final -e dropped ("rape", "raped", "raping")."""
    w = re.escape(word)
    if word.endswith("e") and len(word) > 2:
        return w[:-1] + "(?:e|es|ed|ing|er|ers|ist|ists)"
    if word.endswith("y") and len(word) > 3:
        return w[:-1] + "(?:y|ies|ied|ying|ier|iers)"
    return w + f"(?:{re.escape(word[-1])})?(?:s|es|ed|ing|er|ers|ist|ists)?"


_GAP = r"[\W_]+(?:[a-z0-9']+[\W_]+){0,2}?"
"""Between the words of a term: up to two other words ("earth is flat", "end it all")."""


def term_pattern(term: str) -> str:
    """The regular expression (lower case, without anchors) of one term of
    :data:`HARM_AREAS`: its words in order, each with its inflections, up to two words apart."""
    return _GAP.join(_word_pattern(w) for w in term.split())


@lru_cache(maxsize=1)
def _area_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    """One compiled alternation per area, longest terms first."""
    return tuple(
        (area, re.compile(r"\b(?:" + "|".join(term_pattern(t) for t in sorted(terms, key=len,
                          reverse=True)) + r")\b"))
        for area, terms in HARM_AREAS.items()
    )  # fmt: skip


_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a",
                       "$": "s", "\u2019": "'", "\u2018": "'"})  # fmt: skip
_LEET_WORD = re.compile(r"\b(?=[a-z0-9@$]*[a-z])(?=[a-z0-9@$]*[0-9@$])[a-z0-9@$]+\b")


def normalise(text: str) -> str:
    """``text`` lower-cased, typographic apostrophes straightened and look-alike digits and
    signs inside words read as letters ("m3th", "b0mb", "$teal"; a number stays a number):
    what the patterns read."""
    lowered = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    return _LEET_WORD.sub(lambda m: m.group(0).translate(_LEET), lowered)


def lexicon_hits(text: str) -> list[LexiconHit]:
    """The terms of :data:`HARM_AREAS` that occur in ``text``, in area order and text order
    within an area. Pure; never raises for any string."""
    lowered = normalise(text)
    return [
        LexiconHit(area, m.group(0))
        for area, pattern in _area_patterns()
        for m in pattern.finditer(lowered)
    ]


def screening_hits(text: str, *, how_to: bool = False) -> list[LexiconHit]:
    """What keeps ``text`` out of clarification: its :func:`lexicon_hits` (an area of
    :data:`CONDITIONS` only when its condition matches too, or, for ``medical_emergency``,
    when ``how_to``: the request asks for a way to do it) and the :data:`INTENTS` that
    match (area ``intent:<name>``). Empty when none. Pure."""
    lowered = normalise(text)
    hits = []
    for hit in lexicon_hits(text):
        condition = CONDITIONS.get(hit.area)
        how_to_counts = how_to and hit.area == "medical_emergency"
        if condition is None or how_to_counts or condition.search(lowered):
            hits.append(hit)
    for name, pattern in INTENTS.items():
        m = pattern.search(lowered)
        if m is not None:
            hits.append(LexiconHit(f"intent:{name}", m.group(0)))
    return hits


def harm_terms(text: str) -> set[str]:
    """The words of ``text`` that belong to a harm term found in it (lower case): what a
    question about ``text`` must not repeat."""
    return {w for hit in lexicon_hits(text) for w in re.findall(r"[a-z0-9']+", hit.text)}
