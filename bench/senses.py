#!/usr/bin/env python3
"""Do ELMo vectors separate word senses in context? A check on hand-written sentences.

24 ambiguous words, two senses each, six sentences per sense, written for this probe (not taken
from any evaluation set). Each sentence is embedded with the ``elmo`` component; we report the
mean cosine similarity of the word's vectors within a sense and across senses, and
leave-one-out nearest-centroid sense accuracy (the paper's WSD method), per word and over all
288 sentences. A static vector (the context-free layer 0) gives the same vector in every
sentence: similarity 1.0 everywhere and chance-level accuracy. The centroids are a
``spacy_elmo.senses.SenseInventory`` (the ``elmo_senses`` component's).

    python bench/senses.py [--weights PATH] [--mix average|top|layer:N] [--summary] [--json]

``--summary`` prints only the overall accuracy for the mixes top, average and layer:1.
"""
from __future__ import annotations

import argparse
import itertools
import json
from typing import Dict, List, Tuple

import numpy as np
import spacy

from spacy_elmo.senses import SenseInventory

SENSES: Dict[str, Tuple[Tuple[str, List[str]], Tuple[str, List[str]]]] = {
    "bank": (
        ("river", [
            "He sat down on the bank of the river and watched the water .",
            "The boat drifted slowly toward the muddy bank .",
            "Wild flowers grew along the green bank of the stream .",
            "They walked along the bank until they reached the old bridge .",
            "The children fished from the steep bank of the brook .",
            "The flood had washed away part of the far bank .",
        ]),
        ("money", [
            "She put all her money in the bank .",
            "The bank refused to lend him any more money .",
            "He had a clerk's place at a bank in the city .",
            "The bank paid interest on every deposit .",
            "My father kept his savings in the county bank .",
            "The bank opened a new branch near the station .",
        ]),
    ),
    "play": (
        ("theatre", [
            "We went to the theatre to see a new play .",
            "The play was written by a young poet and performed in London .",
            "The actors rehearsed the play for many weeks .",
            "In the third act of the play the king dies .",
            "She read the play aloud to her sisters .",
            "The critics praised the play after its first night .",
        ]),
        ("game", [
            "The boys went out to play in the garden .",
            "The children play football in the field every afternoon .",
            "Let us play a game of cards after dinner .",
            "The little dog loved to play with the ball .",
            "They would play on the sand until the tide came in .",
            "The twins were allowed to play outside after school .",
        ]),
    ),
    "light": (
        ("illumination", [
            "The light of the lamp fell upon the table .",
            "There was not enough light to read by .",
            "A faint light shone from the window of the cottage .",
            "The morning light came through the curtains .",
            "He saw a light moving across the dark field .",
            "She lit a candle and the light filled the little room .",
        ]),
        ("not heavy", [
            "The basket was light enough for a child to carry .",
            "She wore a light summer dress .",
            "The box was so light that he lifted it with one hand .",
            "He had a light step and walked quickly .",
            "Take only a light bag for the journey .",
            "The new bicycle is light and easy to carry up the stairs .",
        ]),
    ),
    "bat": (
        ("animal", [
            "A bat flew out of the cave at dusk .",
            "The bat hung upside down from the roof of the barn .",
            "At night a bat hunts moths by sound .",
            "We found a sleeping bat behind the shutters .",
            "The little bat flapped its leathery wings and vanished into the dark .",
            "A bat came in through the open window and circled the lamp .",
        ]),
        ("club", [
            "He swung the bat and hit the ball over the fence .",
            "She bought a new cricket bat for the summer .",
            "The batsman lifted his bat to thank the crowd .",
            "The wooden bat cracked when it struck the ball .",
            "He leaned his bat against the wall of the pavilion .",
            "The coach showed the boy how to hold the bat .",
        ]),
    ),
    "bark": (
        ("dog", [
            "The dog gave a loud bark when the postman came .",
            "We heard the bark of a dog far down the road .",
            "The puppy's bark was more playful than fierce .",
            "A sharp bark woke the whole household .",
            "The old hound answered with a deep bark .",
            "Every bark from the kennel made the horses uneasy .",
        ]),
        ("tree", [
            "The bark of the old oak was rough and grey .",
            "Deer had stripped the bark from the young trees .",
            "The boy carved his name in the bark of the birch .",
            "Moss grew thickly on the north side of the bark .",
            "They made a canoe from the bark of a tree .",
            "Beetles live under the loose bark of dead pines .",
        ]),
    ),
    "spring": (
        ("season", [
            "The flowers bloom early in the spring .",
            "We plant the garden every spring .",
            "In spring the days grow longer and warmer .",
            "The lambs were born in the spring of that year .",
            "They were married in the spring after the war .",
            "The birds return from the south each spring .",
        ]),
        ("coil", [
            "The spring inside the clock was broken .",
            "He pressed the spring and the lid flew open .",
            "A steel spring keeps the door closed .",
            "The old mattress had a spring poking through the cloth .",
            "The watchmaker replaced the tiny spring with a new one .",
            "When the spring snapped the toy stopped moving .",
        ]),
    ),
    "match": (
        ("fire", [
            "He struck a match to light the candle .",
            "She lit the fire with a single match .",
            "The match flared and then went out in the wind .",
            "He held the burning match to his pipe .",
            "There was only one dry match left in the box .",
            "She blew out the match before it burned her fingers .",
        ]),
        ("contest", [
            "Our team won the football match on Saturday .",
            "The tennis match lasted for more than three hours .",
            "Thousands of people came to watch the match .",
            "The boxing match was stopped in the fifth round .",
            "He scored twice in the last match of the season .",
            "The chess match between the two masters ended in a draw .",
        ]),
    ),
    "crane": (
        ("bird", [
            "A crane stood on one leg in the shallow marsh .",
            "The crane spread its long wings and flew over the lake .",
            "We watched a grey crane catch a fish in the reeds .",
            "The crane nests in wet meadows far from towns .",
            "With its long neck the crane looked like a heron .",
            "A single crane called from the marsh at dawn .",
        ]),
        ("machine", [
            "The crane lifted the steel beam onto the roof .",
            "A tall crane towered over the building site .",
            "The driver of the crane lowered the container onto the ship .",
            "They used a crane to move the heavy engine .",
            "The crane swung its load slowly across the harbour .",
            "Workers waited while the crane raised the concrete slab .",
        ]),
    ),
    "seal": (
        ("animal", [
            "A seal was lying on the rocks in the sun .",
            "The seal dived into the cold water after a fish .",
            "We saw a grey seal swimming near the harbour .",
            "The young seal had soft white fur .",
            "Fishermen said a seal had been stealing from their nets .",
            "The seal barked and slid off the ice .",
        ]),
        ("stamp", [
            "The letter bore the royal seal in red wax .",
            "He broke the seal and unfolded the document .",
            "The king pressed his seal into the hot wax .",
            "The treaty was signed and marked with the seal of the city .",
            "Nobody had touched the seal on the envelope .",
            "The clerk fixed the official seal to the certificate .",
        ]),
    ),
    "mouse": (
        ("animal", [
            "The cat caught a mouse in the kitchen .",
            "A little mouse ran across the barn floor .",
            "The mouse nibbled the cheese and ran back to its hole .",
            "She screamed when a mouse came out from under the stove .",
            "The field mouse made its nest in the tall grass .",
            "An owl swooped down on the mouse in the field .",
        ]),
        ("computer", [
            "Click the left button of the mouse to open the file .",
            "He moved the mouse and the cursor jumped across the screen .",
            "My wireless mouse needs a new battery .",
            "Drag the icon with the mouse into the folder .",
            "She plugged the mouse into the laptop .",
            "Right click with the mouse to see more options .",
        ]),
    ),
    "letter": (
        ("alphabet", [
            "The word begins with a capital letter .",
            "The first letter of the alphabet is A .",
            "Each letter on the sign was painted in gold .",
            "The child learned to write every letter of her name .",
            "Replace the missing letter to complete the word .",
            "The password must contain at least one letter and one number .",
        ]),
        ("mail", [
            "She wrote a long letter to her mother .",
            "The postman brought a letter from America .",
            "He read the letter twice and then burned it .",
            "I received a letter of thanks from the committee .",
            "The letter was sealed and sent by the evening post .",
            "They kept every letter he had sent from the front .",
        ]),
    ),
    "ring": (
        ("jewellery", [
            "He gave her a gold ring on their wedding day .",
            "She wore a diamond ring on her left hand .",
            "The ring slipped off his finger into the sink .",
            "Her grandmother left her a silver ring .",
            "The jeweller made the ring a little smaller .",
            "He lost his ring while swimming in the lake .",
        ]),
        ("sound", [
            "There was a ring at the door just after midnight .",
            "The ring of the bell called the children to class .",
            "I heard the ring of the telephone in the hall .",
            "The clear ring of the church bells carried across the valley .",
            "Give me a ring when you arrive at the station .",
            "The sharp ring of the alarm woke everyone .",
        ]),
    ),
    "date": (
        ("calendar", [
            "What is the date of the meeting ?",
            "Please write the date at the top of the page .",
            "The date of the wedding was fixed for June .",
            "The letter had no date and no signature .",
            "We still have not agreed on a date for the trip .",
            "The expiry date is printed on the side of the box .",
        ]),
        ("fruit", [
            "He ate a sweet date with his coffee .",
            "The date palm grows well in the desert .",
            "She stuffed each date with an almond .",
            "A dried date is full of sugar .",
            "The travellers shared a date and some bread under the tent .",
            "Remove the stone before you chop the date into the cake .",
        ]),
    ),
    "rock": (
        ("stone", [
            "The ship struck a rock and began to sink .",
            "He sat on a large rock by the sea .",
            "The climbers rested under a huge rock .",
            "Water had worn a hollow in the rock .",
            "A rock rolled down the hill and blocked the road .",
            "The crab hid in a crack of the rock .",
        ]),
        ("music", [
            "She listens to rock and jazz on the radio .",
            "The band played loud rock all night .",
            "He has been a rock singer for twenty years .",
            "The festival mixes rock with folk music .",
            "Their first album was classic rock with heavy guitars .",
            "My brother only listens to punk and rock .",
        ]),
    ),
    "watch": (
        ("timepiece", [
            "He looked at his watch and saw that he was late .",
            "She gave him a gold watch for his birthday .",
            "My watch stopped because the battery was dead .",
            "The old man wound his watch every evening .",
            "He wore his father's watch on a chain .",
            "The watch on her wrist was five minutes fast .",
        ]),
        ("look at", [
            "We sat down to watch the sunset .",
            "The children like to watch cartoons on Saturday .",
            "Please watch the baby while I cook .",
            "They stayed up late to watch the game .",
            "The guard had to watch the gate all night .",
            "I could watch the waves for hours .",
        ]),
    ),
    "train": (
        ("railway", [
            "We took the train to London .",
            "The train was late because of the snow .",
            "She waved as the train pulled out of the station .",
            "He fell asleep on the night train to Paris .",
            "The last train leaves at midnight .",
            "A goods train rattled past the farm .",
        ]),
        ("teach", [
            "It takes years to train a good doctor .",
            "They train the dogs to find people in the snow .",
            "The coach will train the team every morning .",
            "You must train your voice before you can sing opera .",
            "She decided to train as a nurse .",
            "The army will train the recruits for six months .",
        ]),
    ),
    "bear": (
        ("animal", [
            "A brown bear came out of the forest .",
            "The bear climbed the tree to reach the honey .",
            "The hunters followed the tracks of a bear in the snow .",
            "A polar bear swam between the floating ice .",
            "The bear slept in its den all winter .",
            "The child hugged her stuffed bear and fell asleep .",
        ]),
        ("endure", [
            "I cannot bear the noise any longer .",
            "She could not bear to see him suffer .",
            "He had to bear the pain without complaint .",
            "They could hardly bear the heat of the desert .",
            "How can you bear such a cold house ?",
            "The old man could not bear to leave his home .",
        ]),
    ),
    "wave": (
        ("water", [
            "A huge wave crashed against the rocks .",
            "The wave carried the surfer toward the beach .",
            "The little boat rose on each wave .",
            "A wave washed the sand castle away .",
            "The storm sent wave after wave over the sea wall .",
            "She dived under the wave before it broke .",
        ]),
        ("hand", [
            "She gave a friendly wave from the window .",
            "With a wave of his hand he dismissed the servants .",
            "He answered my wave with a nod .",
            "The queen greeted the crowd with a small wave .",
            "A wave from the conductor started the music .",
            "She said goodbye with a wave and a smile .",
        ]),
    ),
    "current": (
        ("flow", [
            "The current carried the boat down the river .",
            "He was too tired to swim against the current .",
            "A strong current runs through the narrow channel .",
            "The electric current flows through the copper wire .",
            "Turn off the current before you touch the cable .",
            "The cold current keeps the coast cool in summer .",
        ]),
        ("present", [
            "The current prices are higher than last year .",
            "Who is the current president of the club ?",
            "Please send me your current address .",
            "The current system works well enough .",
            "In the current situation we cannot hire anyone .",
            "Her current job is close to home .",
        ]),
    ),
    "key": (
        ("lock", [
            "He turned the key and opened the door .",
            "I lost the key to my car .",
            "She hid the key under the mat .",
            "The key would not fit in the rusty lock .",
            "He kept the key to the cellar on a string .",
            "The landlord gave us a spare key .",
        ]),
        ("important", [
            "Trust is the key to a good marriage .",
            "Water is a key factor in the growth of plants .",
            "She played a key role in the negotiations .",
            "Practice is the key to learning a language .",
            "The key question is who will pay for it .",
            "He was a key witness in the trial .",
        ]),
    ),
    "court": (
        ("law", [
            "The court found him guilty of theft .",
            "She had to appear in court on Monday .",
            "The court ordered the company to pay damages .",
            "The case was brought before the high court .",
            "The judge cleared the court before the verdict .",
            "His lawyer asked the court for more time .",
        ]),
        ("sports ground", [
            "The players walked onto the tennis court .",
            "The school built a new basketball court .",
            "The ball bounced off the edge of the court .",
            "They swept the snow from the court before the game .",
            "The court was marked with white lines .",
            "We booked the squash court for an hour .",
        ]),
    ),
    "pen": (
        ("writing", [
            "She signed the letter with a blue pen .",
            "My pen has run out of ink .",
            "He took out a pen and wrote down the number .",
            "Can I borrow your pen for a moment ?",
            "The old fountain pen left blots on the page .",
            "The pen scratched across the paper .",
        ]),
        ("enclosure", [
            "The farmer drove the sheep into the pen .",
            "The pigs were kept in a muddy pen behind the barn .",
            "The calf escaped from its pen during the night .",
            "He built a wooden pen for the goats .",
            "The dogs barked at the lambs in the pen .",
            "The chickens were shut in their pen at dusk .",
        ]),
    ),
    "organ": (
        ("body", [
            "The heart is the organ that pumps blood .",
            "The liver is the largest organ inside the body .",
            "The patient needed a new organ after the accident .",
            "The skin is an organ that protects the body .",
            "She signed up to donate an organ after her death .",
            "The surgeons removed the damaged organ .",
        ]),
        ("instrument", [
            "The organ played as the bride walked down the aisle .",
            "He practises on the church organ every Sunday .",
            "The old organ had hundreds of pipes .",
            "Bach wrote many pieces for the organ .",
            "The sound of the organ filled the cathedral .",
            "She learned to play the organ as a child .",
        ]),
    ),
    "fair": (
        ("just", [
            "It is not fair that he gets more than us .",
            "The judge was fair to both sides .",
            "Everyone deserves a fair trial .",
            "She thought the price was fair for such a good coat .",
            "The teacher was strict but fair .",
            "We want a fair share of the profits .",
        ]),
        ("event", [
            "We rode the big wheel at the fair .",
            "The county fair opens next week .",
            "He won a prize for his pig at the fair .",
            "The children spent their pocket money at the fair .",
            "A book fair is held in the city every spring .",
            "The village fair had games and stalls and music .",
        ]),
    ),
}


def vectors_of(nlp, word: str, sentences: List[str]) -> np.ndarray:
    rows = []
    for doc in nlp.pipe(sentences):
        token = next(t for t in doc if t.lower_ == word)
        rows.append(token._.elmo)
    return np.stack(rows)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def evaluate(nlp) -> Dict[str, Dict[str, float]]:
    report = {}
    for word, ((sense_a, sents_a), (sense_b, sents_b)) in SENSES.items():
        va, vb = vectors_of(nlp, word, sents_a), vectors_of(nlp, word, sents_b)
        within = [cosine(x, y) for v in (va, vb) for x, y in itertools.combinations(v, 2)]
        across = [cosine(x, y) for x in va for y in vb]
        vectors = np.concatenate([va, vb])
        labels = [sense_a] * len(va) + [sense_b] * len(vb)
        correct = 0
        for i in range(len(labels)):  # leave one out: centroids of the other sentences, nearest by cosine
            rest = [j for j in range(len(labels)) if j != i]
            inventory = SenseInventory()
            inventory.add_vectors([word] * len(rest), [labels[j] for j in rest], vectors[rest])
            correct += int(inventory.disambiguate_vector(word, vectors[i]).sense == labels[i])
        report[word] = {
            "senses": f"{sense_a} / {sense_b}",
            "within_sense_cos": float(np.mean(within)),
            "across_sense_cos": float(np.mean(across)),
            "nearest_centroid_accuracy": correct / len(labels),
        }
    return report


def overall_accuracy(report: Dict[str, Dict[str, float]]) -> float:
    """Leave-one-out nearest-centroid accuracy over every sentence of every word."""
    total = sum(2 * len(SENSES[w][0][1]) for w in report)
    return sum(r["nearest_centroid_accuracy"] * 2 * len(SENSES[w][0][1]) for w, r in report.items()) / total


def pipeline(weights, mix: str):
    nlp = spacy.blank("en")
    config = {"mix": mix}
    if weights:
        config["weights"] = weights
    nlp.add_pipe("elmo", config=config)
    return nlp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="model path (default: the embedded default model)")
    ap.add_argument("--mix", default="average")
    ap.add_argument("--summary", action="store_true", help="overall accuracy for the mixes top, average and layer:1")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.summary:
        rows = {mix: evaluate(pipeline(args.weights, mix)) for mix in ("top", "average", "layer:1")}
        if args.json:
            print(json.dumps({mix: {"overall_accuracy": overall_accuracy(r), "words": r} for mix, r in rows.items()}, indent=1))
            return
        print("| mix | words | sentences | nearest-centroid accuracy (leave-one-out) | mean cos within / across |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for mix, r in rows.items():
            within = np.mean([x["within_sense_cos"] for x in r.values()])
            across = np.mean([x["across_sense_cos"] for x in r.values()])
            n = sum(2 * len(SENSES[w][0][1]) for w in r)
            print(f"| {mix} | {len(r)} | {n} | {overall_accuracy(r):.1%} | {within:.2f} / {across:.2f} |")
        return
    report = evaluate(pipeline(args.weights, args.mix))
    if args.json:
        print(json.dumps({"overall_accuracy": overall_accuracy(report), "words": report}, indent=1))
        return
    print("| word | senses | cos within a sense | cos across senses | nearest-centroid accuracy (leave-one-out) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for word, r in report.items():
        print(f"| {word} | {r['senses']} | {r['within_sense_cos']:.2f} | {r['across_sense_cos']:.2f} | {r['nearest_centroid_accuracy']:.0%} |")
    print(f"| **all {len(report)} words** | | | | **{overall_accuracy(report):.1%}** |")


if __name__ == "__main__":
    main()
