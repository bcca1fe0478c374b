"""A labelled synthetic PII corpus, generated in code from a seeded ``random.Random``.

Every value is synthetic: names and streets from short lists, NANP numbers in the 555
exchange or random ranges, Luhn-valid card numbers built from public test-card prefixes
plus random digits, SSNs drawn inside the SSA's valid ranges, documentation IP ranges and
random addresses. Nothing is copied from real data.

``generate_corpus()`` returns :class:`CorpusItem` objects: the sentence and the exact
character spans (with kinds) of every PII value in it. Negative items carry no labels and
are full of look-alikes that must NOT be redacted: Luhn-invalid 16-digit numbers, version
strings, dates, times, prices, order numbers, invalid IPs and invalid SSNs, and so on.
"""

from __future__ import annotations

import ipaddress
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

KINDS = ("email", "phone", "card", "gov_id", "ip", "address")


@dataclass(frozen=True)
class Label:
    """``text[start:end]`` is a PII value of ``kind``."""

    start: int
    end: int
    kind: str


@dataclass(frozen=True)
class CorpusItem:
    """One sentence and its labelled PII spans (empty for negative items)."""

    text: str
    labels: tuple[Label, ...]
    negative: bool = False


# --------------------------------------------------------------------------- value makers

FIRST = ["alice", "bob", "carol", "dmitri", "eve", "farah", "gustavo", "hana", "ivan", "jun",
         "kofi", "lena", "marta", "nikhil", "olga", "pedro", "qing", "rosa", "sami", "tomas"]
LAST = ["smith", "garcia", "nguyen", "okafor", "muller", "rossi", "kowalski", "tanaka",
        "dubois", "haddad", "silva", "obrien", "larsen", "patel", "cohen", "ivanova"]
DOMAINS = ["example.com", "example.org", "mail.example.net", "corp.example.co.uk",
           "uni.example.edu", "example.io", "post.example.de", "shop.example.fr"]
STREETS = ["Oak", "Maple", "Main", "Baker", "Elm", "Washington", "Lincoln", "Park", "Cedar",
           "High", "Church", "Mill", "Old Mill", "North Main", "Martin Luther King Jr",
           "5th", "42nd", "Sunset", "Willow Creek", "Station", "King", "Queen", "Victoria",
           "Chestnut", "Lakeview"]
SUFFIXES = ["Street", "St", "St.", "Avenue", "Ave", "Ave.", "Road", "Rd", "Lane", "Ln",
            "Boulevard", "Blvd", "Drive", "Dr", "Court", "Place", "Way", "Terrace",
            "Parkway", "Crescent", "Close", "Square"]
US_TAILS = [("Springfield", "IL", "62704"), ("Austin", "TX", "78701"),
            ("Denver", "CO", "80202"), ("Portland", "OR", "97205"),
            ("Boston", "MA", "02108"), ("San Jose", "CA", "95112"),
            ("Miami", "FL", "33131"), ("Columbus", "OH", "43215")]
UK_TAILS = [("London", "NW1 6XE"), ("Manchester", "M1 1AE"), ("Leeds", "LS1 4AP"),
            ("Bristol", "BS1 5TR"), ("Glasgow", "G2 1DY")]
CARD_PREFIXES = [("4", 16), ("4", 13), ("4", 19), ("51", 16), ("55", 16), ("2221", 16),
                 ("34", 15), ("37", 15), ("6011", 16), ("65", 16), ("3528", 16),
                 ("36", 14), ("62", 16)]
NINO_FIRST = "ABCEGHJKLMNOPRSTWXYZ"
NINO_SECOND = "ABCEGHJKLMNPRSTWXYZ"
NINO_BAD_PREFIXES = {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}
DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"


def _luhn_check_digit(payload: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(payload)):
        d = int(ch)
        if i % 2 == 0:  # these positions are doubled once the check digit is appended
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def card_number(rng: random.Random, valid: bool = True) -> str:
    """A formatted card number; Luhn-valid when ``valid`` else Luhn-invalid."""
    prefix, length = rng.choice(CARD_PREFIXES)
    payload = prefix + _digits(rng, length - len(prefix) - 1)
    check = _luhn_check_digit(payload)
    if not valid:
        check = str((int(check) + rng.randint(1, 9)) % 10)
    number = payload + check
    if length in (14, 15):  # Diners 4-6-4, Amex 4-6-5
        groups = [number[:4], number[4:10], number[10:]]
    else:
        groups = [number[i:i + 4] for i in range(0, length, 4)]
    sep = rng.choice([" ", "-", ""] if length != 13 else [""])
    return sep.join(groups)


def email(rng: random.Random) -> str:
    first, last, domain = rng.choice(FIRST), rng.choice(LAST), rng.choice(DOMAINS)
    form = rng.randrange(6)
    local = [f"{first}.{last}", f"{first}{last}{rng.randint(1, 99)}", f"{first[0]}_{last}",
             f"{first}+{rng.choice(['news', 'shop', 'work'])}",
             f"{last}.{first}.{rng.randint(1, 9)}",
             f"{first.capitalize()}.{last.capitalize()}"][form]
    return f"{local}@{domain}"


def phone(rng: random.Random, bare_ok: bool = False) -> str:
    a = f"{rng.randint(2, 9)}{_digits(rng, 2)}"
    e = f"{rng.randint(2, 9)}{_digits(rng, 2)}"
    line = _digits(rng, 4)
    forms: list[Callable[[], str]] = [
        lambda: f"({a}) {e}-{line}",
        lambda: f"{a}-{e}-{line}",
        lambda: f"{a}.{e}.{line}",
        lambda: f"{a} {e} {line}",
        lambda: f"+1 {a} {e} {line}",
        lambda: f"+1-{a}-{e}-{line}",
        lambda: f"1-800-{e}-{line}",
        lambda: f"+1 ({a}) {e}-{line}",
        lambda: f"({a}) {e}-{line} ext. {rng.randint(1, 999)}",
        lambda: f"({a}){e}-{line}",
        lambda: f"{a}/{e}-{line}",
        lambda: f"+353 1 {_digits(rng, 3)} {_digits(rng, 4)}",
        lambda: f"+44 20 {_digits(rng, 4)} {_digits(rng, 4)}",
        lambda: f"+44 7700 900{_digits(rng, 3)}",
        lambda: f"+44 (0)20 {_digits(rng, 4)} {_digits(rng, 4)}",
        lambda: f"+49 30 {_digits(rng, 8)}",
        lambda: f"+49 151 {_digits(rng, 8)}",
        lambda: f"+33 1 {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)}",
        lambda: f"+33 6 {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)}",
        lambda: f"+91 98{_digits(rng, 3)} {_digits(rng, 5)}",
        lambda: f"+61 4{_digits(rng, 2)} {_digits(rng, 3)} {_digits(rng, 3)}",
        lambda: f"+81 3-{_digits(rng, 4)}-{_digits(rng, 4)}",
        lambda: f"+55 11 9{_digits(rng, 4)}-{_digits(rng, 4)}",
        lambda: f"+1{a}{e}{line}",
        lambda: f"+447700900{_digits(rng, 3)}",
        lambda: f"020 {_digits(rng, 4)} {_digits(rng, 4)}",
        lambda: f"07700 900{_digits(rng, 3)}",
        lambda: f"0161 {_digits(rng, 3)} {_digits(rng, 4)}",
        lambda: f"(020) {_digits(rng, 4)} {_digits(rng, 4)}",
        lambda: f"030 {_digits(rng, 8)}",
        lambda: f"01 {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)} {_digits(rng, 2)}",
    ]
    if bare_ok:
        forms += [lambda: f"{a}{e}{line}", lambda: f"{e}-{line}", lambda: f"1{a}{e}{line}"]
    return rng.choice(forms)()


def _ssn_parts(rng: random.Random) -> tuple[str, str, str]:
    area = rng.choice([n for n in range(1, 900) if n != 666])
    return f"{area:03d}", f"{rng.randint(1, 99):02d}", f"{rng.randint(1, 9999):04d}"


def gov_id(rng: random.Random) -> str:
    form = rng.randrange(6)
    if form in (0, 1):
        a, g, s = _ssn_parts(rng)
        return f"{a}-{g}-{s}" if form == 0 else f"{a} {g} {s}"
    if form == 2:
        group = rng.choice([*range(50, 66), *range(70, 89), 90, 91, 92, *range(94, 100)])
        return f"9{_digits(rng, 2)}-{group}-{_digits(rng, 4)}"
    if form == 3:
        while True:
            prefix = rng.choice(NINO_FIRST) + rng.choice(NINO_SECOND)
            if prefix not in NINO_BAD_PREFIXES:
                break
        if rng.random() < 0.1:
            prefix = "QQ"
        d = _digits(rng, 6)
        suffix = rng.choice("ABCD")
        if rng.random() < 0.5:
            return f"{prefix} {d[:2]} {d[2:4]} {d[4:]} {suffix}"
        return f"{prefix}{d}{suffix}"
    if form == 4:
        number = rng.randint(10_000_000, 99_999_999)
        return f"{number}{DNI_LETTERS[number % 23]}"
    lead = rng.randrange(3)
    number = rng.randint(1_000_000, 9_999_999)
    return f"{'XYZ'[lead]}{number:07d}{DNI_LETTERS[int(f'{lead}{number:07d}') % 23]}"


def bare_ssn(rng: random.Random) -> str:
    return "".join(_ssn_parts(rng))


def sin(rng: random.Random) -> str:
    payload = str(rng.randint(1, 7)) + _digits(rng, 7)
    number = payload + _luhn_check_digit(payload)
    return f"{number[:3]} {number[3:6]} {number[6:]}"


def ip(rng: random.Random) -> str:
    form = rng.randrange(5)
    if form == 0:
        return str(ipaddress.IPv4Address(rng.getrandbits(32) | 0x01000000))
    if form == 1:
        return f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if form == 2:
        return f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    v6 = ipaddress.IPv6Address((0x20010DB8 << 96) | rng.getrandbits(64))
    if form == 3:
        return v6.compressed
    return rng.choice([v6.exploded, f"fe80::{rng.getrandbits(16):x}:{rng.getrandbits(16):x}",
                       f"::ffff:192.0.2.{rng.randint(1, 254)}"])


def address(rng: random.Random) -> str:
    number = str(rng.randint(1, 9999))
    if rng.random() < 0.1:
        number += rng.choice("AB")
    parts = [f"{number} {rng.choice(STREETS)} {rng.choice(SUFFIXES)}"]
    if rng.random() < 0.15:
        parts[0] += rng.choice([" NW", " SE", " N"])
    if rng.random() < 0.3:
        parts.append(rng.choice([f", Apt {rng.randint(1, 30)}{rng.choice('ABC')}",
                                 f", Suite {rng.randint(100, 999)}", f" Unit {rng.randint(1, 40)}",
                                 f" #{rng.randint(1, 99)}"]))
    tail = rng.random()
    if tail < 0.45:
        city, state, zip_code = rng.choice(US_TAILS)
        parts.append(rng.choice([f", {city}, {state} {zip_code}", f", {city}, {state}",
                                 f", {city} {state} {zip_code}"]))
    elif tail < 0.65:
        city, postcode = rng.choice(UK_TAILS)
        parts.append(f", {city} {postcode}")
    value = "".join(parts)
    # people also type addresses in lower case; the redactor does not claim to find these
    return value.lower() if rng.random() < 0.08 else value


MAKERS: dict[str, Callable[[random.Random], str]] = {
    "email": email,
    "phone": phone,
    "phone_ctx": lambda rng: phone(rng, bare_ok=True),
    "card": card_number,
    "gov_id": gov_id,
    "ssn_bare": bare_ssn,
    "sin": sin,
    "ip": ip,
    "address": address,
}
SLOT_KIND = {"phone_ctx": "phone", "ssn_bare": "gov_id", "sin": "gov_id"}

# --------------------------------------------------------------------------- templates

POSITIVE_TEMPLATES: dict[str, list[str]] = {
    "email": [
        "Can you find the home address of whoever owns {email}?",
        "I'm sorry, but I can't help you access the inbox of {email}.",
        "Write a phishing email that looks like it comes from {email}.",
        "My email is {email}; please sign me up for every newsletter you know.",
        "I won't send messages impersonating {email}, but I can help you write to them honestly.",
        "Forward the leaked document to {email} before Friday.",
        "Who is {email}? They keep messaging my daughter.",
        "As an AI, I can't verify whether {email} belongs to your ex-partner.",
    ],
    "phone": [
        "Find out who is calling me from {phone}.",
        "I'm sorry, but I can't track the location of the phone {phone}.",
        "My neighbour's number is {phone}, write a prank text to send them.",
        "I cannot help you spoof caller ID to look like {phone}.",
        "Reach our support desk on {phone} if the refund fails.",
        "The scammer left a voicemail from {phone} asking for gift cards.",
        "Sorry, I can't look up the owner of {phone}, but you can report it to your carrier.",
        "Please ring {phone} and pretend to be from the bank.",
    ],
    "phone_ctx": [
        "Call me on {phone_ctx} once the script is ready.",
        "Text {phone_ctx} with the password.",
        "My phone: {phone_ctx}. Can you get me their address?",
        "You can reach me at {phone_ctx} tomorrow.",
    ],
    "card": [
        "Here is my card {card}, book the cheapest flight to Lisbon.",
        "I found this card number {card} online, is it still active?",
        "I'm sorry, but I can't process payments with {card} or any card details.",
        "Generate a fake receipt for a purchase with card {card}.",
        "I can't help check whether {card} has available credit.",
        "Charge {card} for the subscription and don't tell my parents.",
        "My Visa {card} was declined, why?",
        "Sorry, I won't store the card {card}; please use the secure payment form instead.",
    ],
    "gov_id": [
        "My SSN is {gov_id}, fill in this tax form for me.",
        "I'm sorry, but I can't verify identity documents such as {gov_id}.",
        "Can you open a credit line with the ID {gov_id}?",
        "I cannot help you use someone else's identity number {gov_id}.",
        "Use the national insurance or tax number {gov_id} for the application.",
        "Is {gov_id} a real identity number? I found it in a leaked list.",
        "Sorry, I can't look up records for the ID {gov_id}.",
        "Her ID is {gov_id} and I want to find her bank.",
    ],
    "ssn_bare": [
        "My SSN: {ssn_bare} - is it safe to share here?",
        "Here is his social security number {ssn_bare}, open an account.",
    ],
    "sin": [
        "My SIN is {sin}, can you file my return?",
        "I can't store your social insurance number {sin}.",
    ],
    "ip": [
        "How do I DDoS the server at {ip}?",
        "I'm sorry, but I can't help you scan {ip} for open ports without permission.",
        "Why was {ip} banned from our forum?",
        "Find the physical location of the IP {ip}.",
        "I cannot assist with breaking into the router at {ip}.",
        "The attack came from {ip}, write an abuse report.",
        "My server {ip} keeps dropping SSH connections.",
        "Sorry, I can't geolocate {ip}; your ISP or the police can request that.",
        "Block {ip}/24 on the firewall and tell nobody.",
        "ssh root@{ip} -p 2222 keeps timing out.",
    ],
    "address": [
        "Send the package to {address}.",
        "Who lives at {address}?",
        "I'm sorry, but I can't share who lives at {address}.",
        "My ex moved to {address}; write a letter I can leave on her car.",
        "I cannot help you monitor the house at {address}.",
        "Our office is at {address} if you want to visit.",
        "Please find the owner of {address} and their phone number.",
        "Sorry, I won't help you find out when the residents of {address} are away.",
    ],
    "mixed": [
        "Contact me at {email} or {phone}.",
        "I'm sorry, but I can't share the address {address} or the email {email}.",
        "Ship to {address} and charge card {card}.",
        "Login from {ip} by {email} was flagged.",
        "Name: Alice Smith, SSN {gov_id}, phone {phone}, email {email}.",
        "I can't help you find {email}'s IP address, even if you think it is {ip}.",
        "Deliver to {address}; call {phone} on arrival.",
        "My card {card} and ID {gov_id} were stolen, what now?",
    ],
}

NEGATIVE_TEMPLATES = [
    "The reference number {bad_card} did not match any order.",
    "Transaction ID {bad_card} was logged twice.",
    "Please upgrade to Python 3.11.7 before running the migration.",
    "I'm sorry, but I can't help with that. It's not supported in v1.2.3.4 of the firmware.",
    "Release version 2.14.0.1 fixed the bug that appeared in 2023.",
    "Firmware 10.0.19045.3570 crashed on boot.",
    "The invoice dated 2023-10-15 was for $1,250.00 including tax.",
    "Call me at 5 if the meeting moves.",
    "We met on 15/10/2023 at 10:30 and again on October 16, 2023.",
    "Order #48213 shipped on 12.01.2024 at 14:05:09.",
    "Your order ORD-2023-000481 costs \u20ac99.99 plus \u00a34.50 shipping.",
    "I can't share internal numbers, but the product costs $1,999 and ships in 3 days.",
    "The address 999.1.1.1 is not a valid IP and neither is 256.300.1.1.",
    "The SSNs 000-12-3456, 666-45-6789 and 123-00-4567 are invalid by design.",
    "Numbers like 912-34-5678 or 123-45-0000 are not issued.",
    "The ISBN is 978-0-306-40615-7 and the page range is 100-120.",
    "There were 1,234,567 users in 2022, up 12.5% from 2021.",
    "Take 0.5 mg twice a day for 10 days.",
    "Use std::vector<int> and a::b in the header.",
    "The MAC address 00:1A:2B:3C:4D:5E belongs to the printer.",
    "Main Street is closed today, and Abbey Road is busy.",
    "I walked 5 blocks down the road to the station.",
    "By 2020 Baker Street had changed completely.",
    "Room 4512 is on floor 45, building 7.",
    "The UUID is 123e4567-e89b-12d3-a456-426614174000.",
    "Tracking code 1Z999AA10123456784 shows it in transit.",
    "As an AI, I cannot provide that. The score was 3-2 after 90 minutes.",
    "Run the job at 02:30 and keep 7 days of logs.",
    "The temperature dropped to -12 degrees at 06:00.",
    "Set the timeout to 30000 ms and retry 5 times.",
    "Chapter 12 covers the 1990s; see pages 233-245.",
    "The bill {bad_card} was paid in full on 2024-02-29.",
    "Coordinates 40.7128, -74.0060 mark the city centre.",
    "Kernel 5.15.0.91 and Node 18.17.1 are installed.",
    "I'm sorry, but I cannot write malware. Version 4.2 of the guidelines forbids it.",
    "Meeting ID 845 2213 9071, passcode 1234.",
]


@dataclass
class _Builder:
    parts: list[str]
    labels: list[Label]
    length: int = 0

    def literal(self, s: str) -> None:
        self.parts.append(s)
        self.length += len(s)

    def value(self, s: str, kind: str) -> None:
        self.labels.append(Label(self.length, self.length + len(s), kind))
        self.literal(s)


_SLOT = re.compile(r"\{(\w+)\}")


def _fill(template: str, rng: random.Random) -> CorpusItem:
    b = _Builder([], [])
    pos = 0
    negative = True
    for m in _SLOT.finditer(template):
        b.literal(template[pos:m.start()])
        slot = m.group(1)
        if slot == "bad_card":
            b.literal(card_number(rng, valid=False))
        else:
            negative = False
            b.value(MAKERS[slot](rng), SLOT_KIND.get(slot, slot))
        pos = m.end()
    b.literal(template[pos:])
    return CorpusItem("".join(b.parts), tuple(b.labels), negative=negative)


def generate_corpus(seed: int = 20240607, positives: int = 455, negatives: int = 150
                    ) -> list[CorpusItem]:
    """``positives`` labelled sentences (cycling over every kind, plus mixed ones) followed by
    ``negatives`` look-alike sentences without PII. Deterministic for a given ``seed``."""
    rng = random.Random(seed)
    groups = [*KINDS, "mixed"]
    items = []
    for i in range(positives):
        group = groups[i % len(groups)]
        if group == "phone" and rng.random() < 0.3:
            group = "phone_ctx"
        elif group == "gov_id" and rng.random() < 0.3:
            group = rng.choice(["ssn_bare", "sin"])
        items.append(_fill(rng.choice(POSITIVE_TEMPLATES[group]), rng))
    items += [_fill(NEGATIVE_TEMPLATES[i % len(NEGATIVE_TEMPLATES)], rng)
              for i in range(negatives)]
    return items
