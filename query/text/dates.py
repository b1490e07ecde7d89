"""Time in the question: dates and relative times of English and Italian, as intervals.

``time_spans(message, now)`` finds what a message says about *when* — "in May 2023",
"towards the end of summer 2023", "two weeks ago", "last year", "ieri", "la settimana
scorsa", "l'anno scorso", "a maggio", ``2023-05-07`` — and resolves each against
``now`` (the message's time) into a half-open UTC interval ``[start, end)``. Ranking
uses them as one more signal inside a tier (never to decide eligibility); term
extraction blanks their words (``date_spans``), so "last", "year" or "maggio" of a
date never become topic keywords of the search.

Resolution rules (Lookback's choices; docs/specification.md, step 2):

* a calendar name without a year is its latest occurrence that has begun by ``now``
  ("in May" asked in March 2024 is May 2023); ``next`` looks forward;
* "last week / month / year" is the previous calendar unit (weeks start on Monday);
  "last summer" the latest summer that has ended; "N units ago" is one unit wide,
  centred N units before ``now``; "the last N units" runs from N units ago to now;
* seasons are the northern meteorological ones (summer = June to August; winter Y =
  December Y to February Y+1); "early / mid / late X", "the end of X", "inizio /
  metà / fine X" take the first, middle or last third of X;
* "the week before <date>" runs from a week before the date to the end of its day.

Slash dates (05/07/2023) are left alone: their day and month order differs between
the two languages. Everything is computed in UTC; no locale, clock or network is
consulted, so the same message and ``now`` always give the same intervals.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import regex as re

DAY = timedelta(days=1)

_MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4,
    "apr": 4, "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8,
    "september": 9, "sept": 9, "sep": 9, "october": 10, "oct": 10, "november": 11,
    "nov": 11, "december": 12, "dec": 12,
    "gennaio": 1, "febbraio": 2, "marzo": 3, "aprile": 4, "maggio": 5, "giugno": 6,
    "luglio": 7, "agosto": 8, "settembre": 9, "ottobre": 10, "novembre": 11,
    "dicembre": 12,
}
#: Month names that are also everyday words ("may", "march"), or abbreviations: they
#: are a date only beside a day, a year, a preposition or a qualifier.
_AMBIGUOUS_MONTHS = frozenset({"may", "march", "jan", "feb", "mar", "apr", "jun", "jul",
                               "aug", "sep", "sept", "oct", "nov", "dec"})
#: Season -> its first month (northern meteorological seasons, three months each).
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12,
            "primavera": 3, "estate": 6, "autunno": 9, "inverno": 12}
_WEEKDAYS = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4,
             "saturday": 5, "sunday": 6, "lunedì": 0, "lunedi": 0, "martedì": 1,
             "martedi": 1, "mercoledì": 2, "mercoledi": 2, "giovedì": 3, "giovedi": 3,
             "venerdì": 4, "venerdi": 4, "sabato": 5, "domenica": 6}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
            "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11,
            "twelve": 12, "a couple of": 2, "a couple": 2, "couple of": 2, "a few": 3,
            "few": 3, "several": 3,
            "un": 1, "uno": 1, "una": 1, "un'": 1, "due": 2, "tre": 3, "quattro": 4,
            "cinque": 5, "sei": 6, "sette": 7, "otto": 8, "nove": 9, "dieci": 10,
            "undici": 11, "dodici": 12, "un paio di": 2, "qualche": 3, "alcuni": 3,
            "alcune": 3}
_UNITS = {"day": "day", "days": "day", "week": "week", "weeks": "week", "month": "month",
          "months": "month", "year": "year", "years": "year", "weekend": "weekend",
          "weekends": "weekend",
          "giorno": "day", "giorni": "day", "settimana": "week", "settimane": "week",
          "mese": "month", "mesi": "month", "anno": "year", "anni": "year",
          "fine settimana": "weekend"}


def _alternation(words: Iterable[object]) -> str:
    return "|".join(sorted((re.escape(str(w)).replace(r"\ ", r"\s+") for w in words),
                           key=len, reverse=True))


_A = r"['’]"  # an apostrophe, straight or curly
_MONTH = rf"(?P<month>{_alternation(_MONTHS)})\.?"
_SEASON = rf"(?P<season>{_alternation(_SEASONS)})"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_NUMBER = rf"(?P<n>\d{{1,3}}|{_alternation(_NUMBERS)})"
_UNIT = rf"(?P<unit>{_alternation(_UNITS)})"
_ORD = r"(?:st|nd|rd|th|°|º)?"
_AFTER_PART = r"(?:\s+|(?<=[-'’]))"  # "mid June", "mid-June", "fine dell'estate"
#: Which part of a period: first, middle or last third.
_PART = (rf"(?P<part>early|late|mid-?|(?:at\s+|in\s+|by\s+|near\s+|towards?\s+)?the\s+"
         rf"(?:beginning|start|middle|end)\s+of(?:\s+the)?|"
         rf"(?:all{_A}|alla\s+|agli\s+|ai\s+|a\s+|verso\s+(?:l{_A}|la\s+))?"
         rf"(?:inizio|inizi|fine|met[àa]|primi|ultimi)(?:\s+(?:di|del|dell{_A}|della|d{_A}))?)")
_LAST = r"(?P<rel>last|past|previous|this|next|coming)"
_IT_REL = r"(?P<itrel>scors[oa]|passat[oa]|prossim[oa])"
_ARTICLE = (rf"(?:(?:il|lo|la|l{_A}|quest{_A}|quest[oa]|nell{_A}|nel|nella|in|a|di|del|"
            rf"dell{_A}|della|d{_A})\s*)")
_PREP = (rf"(?P<prep>in|during|on|since|until|till|by|from|of|before|after|around|"
         rf"a|ad|in|nel|nell{_A}|di|del|dell{_A}|d{_A}|entro|durante|dal|dall{_A}|fino\s+a)")


@dataclass(frozen=True)
class TimeSpan:
    """An interval the message names: ``[start, end)``, and where it says so."""

    start: datetime
    end: datetime
    position: int  # the first character of its words in the message
    length: int  # how many characters
    text: str = ""  # those words

    @property
    def start_ms(self) -> int:
        return int(self.start.timestamp() * 1000)

    @property
    def end_ms(self) -> int:
        return int(self.end.timestamp() * 1000)

    def offset_ms(self, ts_ms: int) -> int:
        """0 inside the span; how long before it (negative) or after it (positive)."""
        if ts_ms < self.start_ms:
            return ts_ms - self.start_ms
        return max(0, ts_ms - self.end_ms + 1)


def _month_start(year: int, month: int) -> datetime:
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return datetime(year, month, 1, tzinfo=UTC)


def _day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _number(text: str) -> int:
    text = " ".join(text.lower().split())
    return int(text) if text.isdigit() else _NUMBERS[text]


def _unit_delta(unit: str, count: float) -> timedelta:
    days = {"day": 1, "week": 7, "weekend": 7, "month": 30.44, "year": 365.25}[unit]
    return timedelta(days=days * count)


def _third(start: datetime, end: datetime, part: str | None) -> tuple[datetime, datetime]:
    if not part:
        return start, end
    part = part.lower()
    third = (end - start) / 3
    if any(word in part for word in ("early", "beginning", "start", "inizi", "primi")):
        return start, start + third
    if any(word in part for word in ("mid", "middle", "met")):
        return start + third, end - third
    return end - third, end  # late, end, fine, ultimi


# --------------------------------------------------------------------------- resolvers
#: Each resolver turns a match into an interval, or None to leave the words alone.
Resolved = tuple[datetime, datetime] | None


def _latest(starts: Callable[[int], datetime], now: datetime, *,
            forward: bool = False) -> int:
    """The year whose occurrence is the latest begun by ``now``; the next with
    ``forward``."""
    year = now.year + 1
    while starts(year) > now:
        year -= 1
    return year + 1 if forward else year


def _calendar(match: re.Match[str], now: datetime) -> Resolved:
    """A day, month or season, with or without a year, with an optional part."""
    groups = match.groupdict()
    year = int(groups["year"]) if groups.get("year") else None
    rel = (groups.get("rel") or "").lower()
    itrel = (groups.get("itrel") or "").lower()
    backward = rel in ("last", "past", "previous") or itrel[:5] in ("scors", "passa")
    forward = rel in ("next", "coming") or itrel.startswith("prossim")
    if groups.get("season"):
        first = _SEASONS[groups["season"].lower()]

        def starts(y: int) -> datetime:
            return _month_start(y, first)

        if not (year or rel or itrel or groups.get("part") or groups.get("this_it")
                or groups.get("prep") or groups.get("art") or groups.get("the")):
            return None  # "summer camp", "real estate", "Spring Boot": not a time

        if year is None:
            if rel == "this" or (groups.get("this_it")):
                year = now.year if first != 12 or now.month == 12 else now.year - 1
            elif backward:  # the latest season that has ended
                year = _latest(starts, now)
                if _month_start(year, first + 3) > now:
                    year -= 1
            else:
                year = _latest(starts, now, forward=forward)
        start, end = starts(year), _month_start(year, first + 3)
        return _third(start, end, groups.get("part"))
    word = groups["month"].lower().rstrip(".")
    month = _MONTHS[word]
    day = groups.get("day") or groups.get("day2")
    if day is None and re.match(r"\s*\d", match.string[match.end():]):
        return None  # "February 30": a day that does not exist, not the month
    if word in _AMBIGUOUS_MONTHS and not (day or year or groups.get("part") or rel or itrel
                                          or groups.get("prep")):
        return None
    if word == "may" and not (day or year) and (groups.get("prep") or "").lower() in (
            "a", "ad", "di", "by", "of"):
        return None  # "a may", "by may" are rarely the month
    if day is not None:
        day_number = int(day)

        def day_start(y: int) -> datetime | None:
            if day_number > calendar.monthrange(y, month)[1]:
                return None
            return datetime(y, month, day_number, tzinfo=UTC)

        if not 1 <= day_number <= 31:
            return None
        if year is None:
            year = now.year
            while (found := day_start(year)) is None or found > now:
                year -= 1
                if year < now.year - 4:
                    return None
        found = day_start(year)
        return None if found is None else (found, found + DAY)
    if year is None:
        year = _latest(lambda y: _month_start(y, month), now, forward=forward)
        if backward and _month_start(year, month + 1) > now:
            year -= 1  # "last May" in May is the May before
    return _third(_month_start(year, month), _month_start(year, month + 1),
                  groups.get("part"))


def _year(match: re.Match[str], now: datetime) -> Resolved:
    year = int(match.group("year"))
    return _third(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC),
                  match.groupdict().get("part"))


def _iso(match: re.Match[str], now: datetime) -> Resolved:
    year, month = int(match.group("y")), int(match.group("m"))
    if not 1 <= month <= 12:
        return None
    if match.group("d") is None:
        return _month_start(year, month), _month_start(year, month + 1)
    day = int(match.group("d"))
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    start = datetime(year, month, day, tzinfo=UTC)
    return start, start + DAY


def _days_from_today(offset: int) -> Callable[[re.Match[str], datetime], Resolved]:
    def resolve(match: re.Match[str], now: datetime) -> Resolved:
        start = _day(now) + offset * DAY
        return start, start + DAY
    return resolve


def _ago(match: re.Match[str], now: datetime) -> Resolved:
    unit = _UNITS[" ".join(match.group("unit").lower().split())]
    vague = not match.group("n").isdigit() and _number(match.group("n")) == 3
    count = _number(match.group("n"))
    centre = now - _unit_delta(unit, count)
    if unit == "day" and not vague:  # "3 days ago" is that day
        return _day(centre), _day(centre) + DAY
    # One unit wide, centred; three for "a few", "several", "qualche".
    half = _unit_delta(unit, 1.5 if vague else 0.5)
    return _day(centre - half), _day(centre + half) + DAY


def _within_last(match: re.Match[str], now: datetime) -> Resolved:
    unit = _UNITS[" ".join(match.group("unit").lower().split())]
    count = _number(match.group("n")) if match.group("n") else 1
    return _day(now - _unit_delta(unit, count)), _day(now) + DAY


def _unit_offset(match: re.Match[str] | _Groups, now: datetime) -> Resolved:
    """Last / this / next week, weekend, month or year, as calendar units."""
    groups = match.groupdict()
    unit = _UNITS[" ".join(groups["unit"].lower().split())]
    rel = (groups.get("rel") or groups.get("itrel") or "").lower()
    step = -1 if rel[:4] in ("last", "past", "prev", "scor", "pass") else (
        1 if rel[:4] in ("next", "comi", "pros") else 0)
    today = _day(now)
    if unit == "day":
        return today + step * DAY, today + (step + 1) * DAY
    if unit == "week":
        monday = today - today.weekday() * DAY
        return monday + 7 * step * DAY, monday + 7 * (step + 1) * DAY
    if unit == "weekend":
        in_weekend = today.weekday() >= 5
        saturday = today - ((today.weekday() - 5) % 7) * DAY  # the latest Saturday
        if step < 0:
            start = saturday - 7 * DAY if in_weekend else saturday
        else:
            start = (saturday if in_weekend else saturday + 7 * DAY) + 7 * step * DAY
        return start, start + 2 * DAY
    if unit == "month":
        return _month_start(now.year, now.month + step), _month_start(now.year,
                                                                      now.month + step + 1)
    return datetime(now.year + step, 1, 1, tzinfo=UTC), datetime(now.year + step + 1, 1, 1,
                                                                 tzinfo=UTC)


def _weekday(match: re.Match[str] | _Groups, now: datetime) -> Resolved:
    """Last / on Monday: the latest such day before today (today, for "on")."""
    groups = match.groupdict()
    target = _WEEKDAYS[groups["weekday"].lower()]
    today = _day(now)
    back = (today.weekday() - target) % 7
    if back == 0 and (groups.get("rel") or groups.get("itrel")):
        back = 7
    start = today - back * DAY
    return start, start + DAY


# --------------------------------------------------------------------------- patterns
def _words(pattern: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w'’])(?:{pattern})(?![\w])", re.IGNORECASE)


_DAY_FIRST = rf"(?P<day>\d{{1,2}}){_ORD}\s+(?:of\s+|di\s+)?{_MONTH}(?:,?\s+{_YEAR})?"
_MONTH_FIRST = rf"{_MONTH}\s+(?P<day2>\d{{1,2}}){_ORD}(?:,?\s+{_YEAR})?"
_MONTH_YEAR = (rf"(?:{_PART}{_AFTER_PART})?"
               rf"(?:{_PREP}\s+(?:the\s+month\s+of\s+|il\s+mese\s+di\s+)?)?"
               rf"(?:{_LAST}\s+)?{_MONTH}(?:\s+{_IT_REL})?(?:,?\s+(?:of\s+|del\s+)?{_YEAR})?")
_SEASON_FORM = (rf"(?:{_PART}{_AFTER_PART})?"
                rf"(?:(?:{_PREP}|(?P<art>{_ARTICLE}))\s*)?(?P<the>the\s+)?"
                rf"(?:{_LAST}\s+|(?P<this_it>quest{_A}|quest[oa]\s+)|{_IT_REL}\s+)?{_SEASON}"
                rf"(?:\s+{_IT_REL})?(?:,?\s+(?:of\s+|del\s+|di\s+)?{_YEAR})?")

_Rule = tuple[frozenset[str], re.Pattern[str], Callable[[re.Match[str], datetime], Resolved]]
_YEAR_WORD = "#year"  # what the trigger scan calls a 4-digit year
_MONTH_WORDS = frozenset(_MONTHS)
_UNIT_WORDS = frozenset(word for unit in _UNITS for word in unit.split()) - {"fine"}

#: (trigger words, pattern, resolver), most specific first; a later match may not
#: overlap an earlier one. A rule runs only when the message holds one of its trigger
#: words (a whole word, lower-cased): most messages name no time and cost one scan.
_RULES: tuple[_Rule, ...] = (
    (frozenset({_YEAR_WORD}),
     re.compile(r"(?<![\w/.-])(?P<y>(?:19|20)\d\d)-(?P<m>\d\d)(?:-(?P<d>\d\d))?"
                r"(?:[T ]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:?\d\d)?)?(?![\w/-])"), _iso),
    (_MONTH_WORDS, _words(rf"(?:(?:on|il|the)\s+)?(?:{_DAY_FIRST}|{_MONTH_FIRST})"), _calendar),
    (frozenset({"yesterday", "ieri", "altroieri", "avantieri"}),
     _words(r"(?:the\s+)?day\s+before\s+yesterday|l['’]altro\s*ieri|altroieri|avantieri"),
     _days_from_today(-2)),
    (frozenset({"tomorrow", "dopodomani"}),
     _words(r"(?:the\s+)?day\s+after\s+tomorrow|dopodomani"), _days_from_today(2)),
    (frozenset({"yesterday", "night", "ieri", "stanotte"}),
     _words(r"yesterday(?:\s+(?:morning|afternoon|evening|night))?|last\s+night|"
            r"ieri(?:\s+(?:mattina|pomeriggio|sera|notte))?|stanotte"), _days_from_today(-1)),
    (frozenset({"today", "this", "tonight", "oggi", "stamattina", "stamani", "stasera"}),
     _words(r"today|this\s+(?:morning|afternoon|evening)|tonight|oggi|stamattina|"
            r"stamani|stasera|oggi\s+pomeriggio"), _days_from_today(0)),
    (frozenset({"tomorrow", "domani"}),
     _words(r"tomorrow|domani(?:\s+(?:mattina|pomeriggio|sera))?"), _days_from_today(1)),
    (frozenset({"ago", "back", "fa"}),
     _words(rf"{_NUMBER}\s+{_UNIT}\s+(?:ago|back|fa|or\s+so\s+ago)"), _ago),
    (frozenset({"last", "past", "ultimi", "ultime", "ultimo", "ultima", "scorsi", "scorse",
                "scorso", "scorsa"}),
     _words(rf"(?:in\s+|over\s+|during\s+)?the\s+(?:last|past)\s+(?:{_NUMBER}\s+)?{_UNIT}|"
            rf"(?:negli|nelle|nell{_A}|nel)\s+(?:ultim[ioae]|scors[ioae])\s+(?:{_NUMBER}\s+)?"
            rf"{_UNIT}"), _within_last),
    (frozenset(_SEASONS), _words(rf"{_SEASON_FORM}"), _calendar),
    (_MONTH_WORDS, _words(rf"{_MONTH_YEAR}"), _calendar),
    (frozenset({_YEAR_WORD}),
     _words(rf"(?:{_PART}\s+)?(?:in|during|of|since|until|nel|del|durante|dal|the\s+year|"
            rf"l{_A}anno)\s+{_YEAR}|{_PART}\s+{_YEAR}"), _year),
    (_UNIT_WORDS,
     _words(rf"{_LAST}\s+{_UNIT}|(?:{_ARTICLE})?(?:{_UNIT}\s+{_IT_REL}|{_IT_REL}\s+{_UNIT})|"
            rf"(?P<itthis>quest{_A}\s*anno|quest[oa]\s+(?:settimana|mese|weekend|"
            rf"fine\s+settimana))"), lambda m, now: _unit_offset(_this_it(m), now)),
    (frozenset(_WEEKDAYS),
     _words(rf"(?:{_LAST}\s+|on\s+)(?P<weekday>{_alternation(_WEEKDAYS)})|"
            rf"(?:{_ARTICLE})?(?:(?P<weekday_it>{_alternation(_WEEKDAYS)})\s+{_IT_REL}|"
            rf"{_IT_REL}\s+(?P<weekday_it2>{_alternation(_WEEKDAYS)}))"),
     lambda m, now: _weekday(_weekday_it(m), now)),
)
_TRIGGER = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)|[^\W\d_]+")


def _trigger_words(text: str) -> set[str]:
    return {_YEAR_WORD if word[0].isdigit() else word
            for word in _TRIGGER.findall(text.lower())}


class _Groups:
    """A match's groups with Italian alternatives folded into the shared names."""

    def __init__(self, match: re.Match[str], extra: dict[str, str | None]) -> None:
        self._groups = {**match.groupdict(), **extra}

    def groupdict(self) -> dict[str, Any]:
        return self._groups

    def group(self, name: str) -> str | None:
        return self._groups[name]


def _this_it(match: re.Match[str]) -> _Groups:
    this = match.group("itthis")
    if this is None:
        return _Groups(match, {})
    unit = "year" if "anno" in this.lower() else this.split()[-1]
    if "fine" in this.lower():
        unit = "weekend"
    return _Groups(match, {"unit": unit, "rel": "this"})


def _weekday_it(match: re.Match[str]) -> _Groups:
    groups = match.groupdict()
    day = groups.get("weekday") or groups.get("weekday_it") or groups.get("weekday_it2")
    return _Groups(match, {"weekday": day})


#: "the week before", "two days after", "la settimana prima del" right before a date.
_ANCHORED = re.compile(rf"(?:the\s+|la\s+|il\s+)?(?:{_NUMBER}\s+)?{_UNIT}\s+"
                       rf"(?P<dir>before|after|prima\s+del(?:l{_A})?|dopo\s+il|dopo\s+l{_A})\s*$",
                       re.IGNORECASE)


def time_spans(message: str, now: datetime) -> tuple[TimeSpan, ...]:
    """Every interval ``message`` names, resolved against ``now``, in message order."""
    if not message:
        return ()
    now = now.astimezone(UTC) if now.tzinfo else now.replace(tzinfo=UTC)
    taken: list[tuple[int, int]] = []
    found: list[TimeSpan] = []
    text = message[:10_000]
    words = _trigger_words(text)
    for needs, pattern, resolve in _RULES:
        if words.isdisjoint(needs):
            continue
        for match in pattern.finditer(text):
            begin, end = match.span()
            if begin == end or any(begin < e and s < end for s, e in taken):
                continue
            try:
                interval = resolve(match, now)
            except (ValueError, OverflowError, KeyError):
                interval = None
            if interval is None:
                continue
            start, stop = interval
            anchored = _ANCHORED.search(text, max(0, begin - 40), begin)
            if anchored and anchored.end() == begin and not any(
                    anchored.start() < e and s < begin for s, e in taken):
                count = _number(anchored.group("n")) if anchored.group("n") else 1
                delta = _unit_delta(_UNITS[" ".join(anchored.group("unit").lower().split())],
                                    count)
                if anchored.group("dir").lower().startswith(("before", "prima")):
                    start = start - delta
                else:
                    stop = stop + delta
                begin = anchored.start()
            taken.append((begin, end))
            found.append(TimeSpan(start, stop, begin, end - begin, text[begin:end]))
    return tuple(sorted(found, key=lambda span: span.position))


def date_spans(message: str) -> list[tuple[int, int]]:
    """Where ``message`` names a time, as ``(start, end)`` character spans.

    The words found do not depend on ``now`` (only their resolution does), so term
    extraction can blank them without knowing the message's time.
    """
    reference = datetime(2000, 6, 15, tzinfo=UTC)
    return [(span.position, span.position + span.length)
            for span in time_spans(message, reference)]
