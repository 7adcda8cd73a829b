import re
import unicodedata


def slugify(text: str, sep: str = "-") -> str:
    """A lower-case ASCII slug: the words of ``text`` joined by ``sep``.

    Accents are folded to their base letters ("Café" -> "cafe"); everything that is not a
    letter or a digit separates words.
    """
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^a-z0-9]", sep, text.lower())
    return text.strip(sep)
