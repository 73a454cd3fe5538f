// The text set for tests/golden/tokenizers/families/texts.json.
//
// Every family golden is computed over exactly these cases, in this order.
// tools/gen_hf_tokenizer_goldens.mjs writes them to texts.json; the C++
// tests read that JSON file, never this one.  Invisible, combining and
// control characters are written as \u escapes so this file stays readable.
// Rules: valid UTF-8 only (no lone surrogates), names unique, total text
// size <= 60 KB.

const cp = (...codes) => String.fromCodePoint(...codes);
const range = (a, b) => {
  let s = '';
  for (let c = a; c <= b; c++) s += String.fromCodePoint(c);
  return s;
};

// King James Version, Genesis 1:1-2:3, as printed by `bible -f 'Gen1:1-Gen2:3'`
// (public domain; captured once so regeneration does not need the tool).
const KJV_GEN_1_1_TO_2_3 = [
  "Ge1:1 In the beginning God created the heaven and the earth.\n",
  "Ge1:2 And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.\n",
  "Ge1:3 And God said, Let there be light: and there was light.\n",
  "Ge1:4 And God saw the light, that it was good: and God divided the light from the darkness.\n",
  "Ge1:5 And God called the light Day, and the darkness he called Night. And the evening and the morning were the first day.\n",
  "Ge1:6 And God said, Let there be a firmament in the midst of the waters, and let it divide the waters from the waters.\n",
  "Ge1:7 And God made the firmament, and divided the waters which were under the firmament from the waters which were above the firmament: and it was so.\n",
  "Ge1:8 And God called the firmament Heaven. And the evening and the morning were the second day.\n",
  "Ge1:9 And God said, Let the waters under the heaven be gathered together unto one place, and let the dry land appear: and it was so.\n",
  "Ge1:10 And God called the dry land Earth; and the gathering together of the waters called he Seas: and God saw that it was good.\n",
  "Ge1:11 And God said, Let the earth bring forth grass, the herb yielding seed, and the fruit tree yielding fruit after his kind, whose seed is in itself, upon the earth: and it was so.\n",
  "Ge1:12 And the earth brought forth grass, and herb yielding seed after his kind, and the tree yielding fruit, whose seed was in itself, after his kind: and God saw that it was good.\n",
  "Ge1:13 And the evening and the morning were the third day.\n",
  "Ge1:14 And God said, Let there be lights in the firmament of the heaven to divide the day from the night; and let them be for signs, and for seasons, and for days, and years:\n",
  "Ge1:15 And let them be for lights in the firmament of the heaven to give light upon the earth: and it was so.\n",
  "Ge1:16 And God made two great lights; the greater light to rule the day, and the lesser light to rule the night: he made the stars also.\n",
  "Ge1:17 And God set them in the firmament of the heaven to give light upon the earth,\n",
  "Ge1:18 And to rule over the day and over the night, and to divide the light from the darkness: and God saw that it was good.\n",
  "Ge1:19 And the evening and the morning were the fourth day.\n",
  "Ge1:20 And God said, Let the waters bring forth abundantly the moving creature that hath life, and fowl that may fly above the earth in the open firmament of heaven.\n",
  "Ge1:21 And God created great whales, and every living creature that moveth, which the waters brought forth abundantly, after their kind, and every winged fowl after his kind: and God saw that it was good.\n",
  "Ge1:22 And God blessed them, saying, Be fruitful, and multiply, and fill the waters in the seas, and let fowl multiply in the earth.\n",
  "Ge1:23 And the evening and the morning were the fifth day.\n",
  "Ge1:24 And God said, Let the earth bring forth the living creature after his kind, cattle, and creeping thing, and beast of the earth after his kind: and it was so.\n",
  "Ge1:25 And God made the beast of the earth after his kind, and cattle after their kind, and every thing that creepeth upon the earth after his kind: and God saw that it was good.\n",
  "Ge1:26 And God said, Let us make man in our image, after our likeness: and let them have dominion over the fish of the sea, and over the fowl of the air, and over the cattle, and over all the earth, and over every creeping thing that creepeth upon the earth.\n",
  "Ge1:27 So God created man in his own image, in the image of God created he him; male and female created he them.\n",
  "Ge1:28 And God blessed them, and God said unto them, Be fruitful, and multiply, and replenish the earth, and subdue it: and have dominion over the fish of the sea, and over the fowl of the air, and over every living thing that moveth upon the earth.\n",
  "Ge1:29 And God said, Behold, I have given you every herb bearing seed, which is upon the face of all the earth, and every tree, in the which is the fruit of a tree yielding seed; to you it shall be for meat.\n",
  "Ge1:30 And to every beast of the earth, and to every fowl of the air, and to every thing that creepeth upon the earth, wherein there is life, I have given every green herb for meat: and it was so.\n",
  "Ge1:31 And God saw every thing that he had made, and, behold, it was very good. And the evening and the morning were the sixth day.\n",
  "Ge2:1 Thus the heavens and the earth were finished, and all the host of them.\n",
  "Ge2:2 And on the seventh day God ended his work which he had made; and he rested on the seventh day from all his work which he had made.\n",
  "Ge2:3 And God blessed the seventh day, and sanctified it: because that in it he had rested from all his work which God created and made.\n",
].join("");

const ACCENTED =
  'café naïve résumé Zoë façade Ångström São Paulo mañana Straße Łódź ' +
  'Dvořák crème brûlée Ærøskøbing Ça va? ÉCOLE Élan über ÜBER Œuvre';

const KOREAN = '안녕하세요, 세계! 태초에 말씀이 계시니라. 한국어 텍스트와 숫자 123.';

const LONG_WORD_300 = (() => {
  const base = 'abcdefghijklmnopqrstuvwxyz';
  let s = '';
  for (let i = 0; s.length < 300; i++) s += base[(i * 7) % 26];
  return s;
})();

export const TEXTS = [
  // --- trivial -----------------------------------------------------------
  { name: 'empty', text: '' },
  { name: 'single_space', text: ' ' },
  { name: 'two_spaces', text: '  ' },
  { name: 'single_newline', text: '\n' },
  { name: 'single_tab', text: '\t' },
  { name: 'single_letter', text: 'a' },
  { name: 'hello_world', text: 'Hello world' },
  { name: 'hello_world_leading_space', text: ' Hello world' },
  { name: 'hello_world_trailing_newline', text: 'Hello world\n' },

  // --- English -----------------------------------------------------------
  {
    name: 'english_plain',
    text:
      'The quick brown fox jumps over the lazy dog. Training a language model ' +
      'requires a tokenizer that turns text into integer ids; the ids must match ' +
      'the ones the model was trained with, or the model sees gibberish. ' +
      'In 2024, roughly 1.5 billion people used such systems every week.\n\n' +
      'Second paragraph: short sentences. Questions? Exclamations! (Parentheses) ' +
      'and "quotes", plus a semi-colon; a colon: and an ellipsis...',
  },
  { name: 'kjv_genesis_1_1_to_2_3', text: KJV_GEN_1_1_TO_2_3 },
  {
    name: 'case_mixing',
    text:
      'HELLO hello Hello hELLO HeLLo camelCaseWord PascalCaseWord snake_case_word ' +
      'SCREAMING_SNAKE kebab-case-word XMLHttpRequest iPhone McDonald ABCdef abcDEF',
  },
  {
    name: 'markdown',
    text:
      '# Title\n\n## Subtitle\n\n**bold** _italic_ `inline code` ~~strike~~\n\n' +
      '- item one\n- item two\n  - nested\n1. first\n2. second\n\n' +
      '| col a | col b |\n|-------|------:|\n| 1     | 2     |\n\n> quote\n',
  },
  {
    name: 'html',
    text:
      '<table><tr><td>cell</td><th>head</th></tr></table>\n' +
      '<div class="x" id=\'y\'>&nbsp;&amp;&lt;&gt;&#39;</div><br/><br /><p>para</p>',
  },
  {
    name: 'punctuation_runs',
    text:
      '!!! ??? ... …… —— – -- --- ((( ))) [[[ ]]] {{{ }}} <<< >>> ### $$$ %%% ' +
      ',,, ;;; ::: """ \'\'\' ``` ~~~ ||| \\\\ // ** ++ == !== => -> <=> ::= ?. ¿¡ «» ‹› „“ ”',
  },

  // --- accents, normalization ----------------------------------------------
  { name: 'accents_precomposed_nfc', text: ACCENTED },
  { name: 'accents_decomposed_nfd', text: ACCENTED.normalize('NFD') },
  {
    name: 'nfc_nfd_pairs_adjacent',
    text: 'e\u0301 \u00e9 | A\u030a \u00c5 \u212b | n\u0303 \u00f1 | o\u0308\u0304 \u022b | s\u0323\u0307 \u1e69 s\u0307\u0323',
  },
  {
    name: 'compatibility_chars',
    text:
      '\ufb01nance \ufb02ow \ufb00 \ufb03 \u2126 \u212a \u2460\u2461 \u00bd \u338f ' +
      '\uff76\uff80\uff76\uff85 \uff21\uff22\uff23 \u2122 \u210c \u00b5 \u017f \u1e9b \u0132 \u01c4',
  },
  {
    name: 'combining_mark_stacks',
    text:
      'Z\u0334\u0321\u0327\u031b\u0316\u0354\u0333\u0359\u0333\u033c\u0329\u0331\u035b\u0313\u0350\u030a\u030a\u0309\u0342\u030d\u030e\u0345' +
      'a\u0308\u0308\u0308\u0308 l\u0336\u0338g\u0489o ' +
      'e\u0301\u0302\u0303\u0304\u0305\u0306\u0307\u0308\u0309\u030a\u030b\u030c ' +
      '\u0301leading-combining \u0301 after-space x\u20dd \u0915\u093f\u0902',
  },

  // --- scripts -----------------------------------------------------------
  {
    name: 'greek',
    text:
      'Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν. ' +
      'Καλημέρα κόσμε! ΣΊΣΥΦΟΣ σοφός ς; Ωμέγα ΐ ΰ',
  },
  {
    name: 'cyrillic',
    text:
      'В начале было Слово, и Слово было у Бога. ' +
      'Съешь же ещё этих мягких французских булок, да выпей чаю. ' +
      'Ёё Її Ґґ Ђђ Љљ Ўў ПРИВЕТ мир',
  },
  {
    name: 'arabic_rtl_bidi',
    text:
      'في البدء كان الكلمة، والكلمة كان عند الله. مرحبا بالعالم! ' +
      'بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ ' +
      '\u200fاختبار\u200f \u200eLTR\u200e \u061cعلامة \u202bمضمن\u202c \u202eمعكوس\u202c ' +
      '\u2067عزل\u2069 \u2066ltr\u2069 \u2068first\u2069 ـــ ﻻ ﷺ',
  },
  {
    name: 'hebrew_rtl_bidi',
    text:
      'בְּרֵאשִׁית בָּרָא אֱלֹהִים אֵת הַשָּׁמַיִם וְאֵת הָאָרֶץ. שלום עולם! ' +
      '\u202bשלום\u202c abc \u05d0\u05d1\u05d2 123 \u200fמילה\u200f ״ציטוט״ ׳',
  },
  {
    name: 'devanagari',
    text:
      'नमस्ते दुनिया। आदि में वचन था, और वचन परमेश्वर के साथ था। ' +
      'क्षत्रिय ज्ञान श्री ॐ क्\u200dष क्\u200cष ०१२३४५६७८९ हिन्दी',
  },
  {
    name: 'thai',
    text: 'สวัสดีชาวโลก ในปฐมกาลพระเจ้าทรงเนรมิตสร้างฟ้าและแผ่นดิน ภาษาไทยไม่มีช่องว่างระหว่างคำ ๐๑๒๓',
  },
  {
    name: 'chinese',
    text:
      '太初有道，道与神同在，道就是神。你好，世界！' +
      '繁體中文測試：憂鬱的臺灣烏龜。' + cp(0x20000, 0x20001, 0x2a6a5) + '（扩展B）《书名》「引号」',
  },
  {
    name: 'japanese',
    text: 'いろはにほへと ちりぬるを。カタカナ ﾊﾝｶｸｶﾀｶﾅ 日本語のテキスト、句読点。ゟヿ ー〜 がぎぐ ガギグ',
  },
  { name: 'korean_hangul', text: KOREAN },
  {
    name: 'korean_nfd_jamo',
    text: KOREAN.normalize('NFD') + ' \u1100\u1161\u11a8 \u1112\u1161\u11ab \u3131\u314f',
  },
  {
    name: 'other_scripts',
    text:
      'Բարեւ Աշխարհ ქართული ენა ሰላም ዓለም வணக்கம் উৎসব ਪੰਜਾਬੀ ગુજરાતી ଓଡ଼ିଆ ' +
      'ಕನ್ನಡ മലയാളം සිංහල ລາວ བོད་ཡིག မြန်မာ ខ្មែរ ᠮᠣᠩᠭᠣᠯ ᏣᎳᎩ ᚠᚢᚦ',
  },
  {
    name: 'vietnamese_turkish_german',
    text:
      'Tiếng Việt có dấu: Đây là một câu tiếng Việt. Người ơi! ' +
      'İstanbul ıİiI DİYARBAKIR Straße STRASSE ẞ',
  },
  { name: 'mixed_scripts_no_spaces', text: 'Hello世界Привет🌍مرحبا123abcשלום' },

  // --- emoji -------------------------------------------------------------
  { name: 'emoji_basic', text: '😀 😂 🥲 ❤️ ❤ 👍 🔥 🎉 ☺ ☺️ ✨ 🙂🙃' },
  {
    name: 'emoji_zwj_sequences',
    text:
      '👨\u200d👩\u200d👧\u200d👦 👩\u200d💻 🏳\ufe0f\u200d🌈 🏴\u200d☠\ufe0f ' +
      '🧑🏽\u200d🚀 👩🏿\u200d❤\ufe0f\u200d💋\u200d👨🏻 🐻\u200d❄\ufe0f',
  },
  {
    name: 'emoji_flags',
    text:
      '🇺🇸🇬🇧🇯🇵🇩🇪 🇫🇷 ' +
      cp(0x1f3f4, 0xe0067, 0xe0062, 0xe0073, 0xe0063, 0xe0074, 0xe007f) + ' ' +
      cp(0x1f3f4, 0xe0067, 0xe0062, 0xe0077, 0xe006c, 0xe0073, 0xe007f) + ' lone:' + cp(0x1f1e6),
  },
  { name: 'emoji_skin_tones', text: '👋🏻👋🏼👋🏽👋🏾👋🏿 👋 🏻 alone' },
  { name: 'emoji_keycaps', text: '1\ufe0f\u20e3 2\ufe0f\u20e3 #\ufe0f\u20e3 *\ufe0f\u20e3 0\u20e3 🔟' },
  { name: 'emoji_variation_selectors', text: '\u270c\ufe0e \u270c\ufe0f \u2194\ufe0f text\ufe0e \u2764\ufe0f' },

  // --- whitespace ----------------------------------------------------------
  { name: 'tabs', text: 'a\tb\t\tc\t \td\t\n\tindented\n\t\tdouble' },
  { name: 'crlf', text: 'line1\r\nline2\r\n\r\nline3\r\n' },
  { name: 'lone_cr', text: 'a\rb\r\rc\r' },
  { name: 'space_runs', text: 'a  b   c    d' + ' '.repeat(16) + 'e' + ' '.repeat(33) + 'f' },
  { name: 'newline_runs', text: 'a\n\nb\n\n\n\nc\n \n  \n\t\nd' + '\n'.repeat(10) },
  { name: 'leading_trailing_spaces', text: '   leading and trailing   ' },
  { name: 'only_whitespace_mixed', text: ' \t\n\r\n \u00a0 \n' },
  {
    name: 'unicode_spaces',
    text:
      'a\u00a0b\u2003c\u3000d\u180ee\u200bf\u2002g\u2009h\u202fi\u205fj\u1680k' +
      '\u2007l\u2008m\u200an\u2028o\u2029p\u0085q\ufeffr',
  },
  { name: 'unicode_space_runs', text: '\u00a0\u00a0x \u3000\u3000日本 \u2003\u2003y \u200b\u200bz \u180e' },

  // --- numbers -------------------------------------------------------------
  { name: 'digits_long_run', text: '12345678901234567890123456789012345678901234567890 ' + '9'.repeat(37) },
  {
    name: 'numbers_formats',
    text:
      '3.14159265358979 2.718 0.5 .5 5. 1,000,000 1 000 000 -42 +7 1e-10 6.022e23 ' +
      '0xDEADBEEF 0b1010 007 2024-12-31 12:34:56 $1,234.56 €99,99 50% 3/4 v1.2.3',
  },
  {
    name: 'numbers_non_ascii',
    text:
      '٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ０１２３４５６７８９ １２３．４５ ' +
      'x² y³ z⁴ 10⁻⁹ H₂O ½ ⅓ ¾ ⅞ Ⅻ ⅻ ①②③ ๐๑๒ ᠐᠑᠒ 𝟘𝟙𝟚',
  },

  // --- code ----------------------------------------------------------------
  {
    name: 'code_python',
    text:
      'def fib(n: int) -> int:\n' +
      '    """Return the n-th Fibonacci number."""\n' +
      '    a, b = 0, 1\n' +
      '    for _ in range(n):\n' +
      '        a, b = b, a + b\n' +
      '    return a\n\n\n' +
      'if __name__ == "__main__":\n' +
      "    print(f'{fib(10)=}')  # 55\n",
  },
  {
    name: 'code_cpp',
    text:
      '#include <vector>\n\ntemplate <typename T>\n' +
      'auto sum(const std::vector<T>& v) -> T {\n' +
      '\tT acc{};\n\tfor (auto&& x : v) acc += x;\n\treturn acc;  // ok\n}\n' +
      'int main() { return sum<int>({1, 2, 3}) == 6 ? 0 : 1; }\n',
  },
  {
    name: 'code_json',
    text: '{"key": [1, 2.5, -3e4, true, false, null], "nested": {"a": "b\\n\\t\\u00e9", "": {}}, "arr":[]}',
  },
  {
    name: 'code_regex',
    text:
      String.raw`^(?:[a-z0-9!#$%&'*+/=?^_` + '`' + String.raw`{|}~-]+)@(?:\d{1,3}\.){3}\d{1,3}$ ` +
      String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
  },
  {
    name: 'code_shell_indent',
    text: '#!/bin/sh\nset -eu\nfor f in *.txt; do\n    if [ -s "$f" ]; then\n\techo "$f" | tr a-z A-Z\n    fi\ndone\n',
  },

  // --- contractions and apostrophes ------------------------------------------
  {
    name: 'contractions_ascii',
    text:
      "don't DON'T Don't I'm I'M you're YOU'RE we've WE'VE she'll SHE'LL he'd HE'D " +
      "it's IT'S John's JOHN'S 'S 'T 'RE 'VE 'M 'LL 'D 's 't 're 've 'm 'll 'd 'Ll 'rE",
  },
  {
    name: 'contractions_unicode_apostrophes',
    text: 'don’t DON’T we’ll WE’LL it’s ’s ’ll ’S ’LL ʼs donʼt ‘quoted’ “double” rock ’n’ roll',
  },
  {
    name: 'apostrophe_edges',
    text: "'' ''' 'hello' 'tis ol' y'all can't've O'Neil's rock'n'roll '123 'a 'é '日本 x' ' 's'",
  },

  // --- URLs, e-mail ------------------------------------------------------------
  {
    name: 'urls_and_emails',
    text:
      'https://www.example.com/path/to/page?query=1&x=y#frag http://localhost:8080/ ' +
      'ftp://ftp.example.org/file.tar.gz mailto:someone@example.com ' +
      'user.name+tag@sub.example.co.uk www.wikipedia.org/wiki/Special:Random https://例え.jp/パス?q=値',
  },

  // --- recent Unicode versions --------------------------------------------------
  {
    name: 'unicode_15_0',
    text:
      'Kawi ' + range(0x11f04, 0x11f0c) + ' Nag Mundari ' + range(0x1e4d0, 0x1e4d8) +
      ' CJK-H ' + range(0x31350, 0x31356) + ' Kaktovik ' + range(0x1d2c0, 0x1d2c6) +
      ' Cyrillic-Ext-D ' + range(0x1e030, 0x1e036) + ' emoji ' + cp(0x1fae8, 0x20, 0x1fa77, 0x20, 0x1face, 0x20, 0x1fabf),
  },
  {
    name: 'unicode_15_1',
    text:
      'CJK-I ' + range(0x2ebf0, 0x2ebf6) + ' IDC ' + range(0x2ffc, 0x2fff) + cp(0x31ef) +
      ' emoji ' + cp(0x1f426, 0x200d, 0x1f525) + ' ' + cp(0x1f34b, 0x200d, 0x1f7e9) + ' ' +
      cp(0x1f344, 0x200d, 0x1f7eb) + ' ' + cp(0x26d3, 0xfe0f, 0x200d, 0x1f4a5) + ' ' +
      cp(0x1f642, 0x200d, 0x2194, 0xfe0f),
  },
  {
    name: 'unicode_16_0',
    text:
      'Garay ' + range(0x10d50, 0x10d58) + ' Todhri ' + range(0x105c0, 0x105c8) +
      ' Kirat Rai ' + range(0x16d43, 0x16d4b) + ' Ol Onal ' + range(0x1e5d0, 0x1e5d8) +
      ' Sunuwar ' + range(0x11bc0, 0x11bc8) + ' Tulu-Tigalari ' + range(0x11380, 0x11388) +
      ' Gurung Khema ' + range(0x16100, 0x16108) + ' Legacy ' + range(0x1cc00, 0x1cc06) +
      ' Egyptian-Ext-A ' + range(0x13460, 0x13466) +
      ' emoji ' + cp(0x1fae9, 0x20, 0x1fac6, 0x20, 0x1fadf, 0x20, 0x1f1e8, 0x1f1f6),
  },
  {
    name: 'unicode_17_0',
    text:
      'Sidetic ' + range(0x10940, 0x10948) + ' Tolong Siki ' + range(0x11db0, 0x11db8) +
      ' Beria Erfe ' + range(0x16ea0, 0x16ea8) + ' Tai Yo ' + range(0x1e6c0, 0x1e6c8) +
      ' CJK-J ' + range(0x323b0, 0x323b6) +
      ' emoji ' + cp(0x1faea, 0x20, 0x1fac8, 0x20, 0x1fa8a, 0x20, 0x1f6d8, 0x20, 0x1fa8e, 0x20, 0x1facd, 0x20, 0x1faef),
  },
  {
    name: 'unassigned_private_noncharacters',
    text:
      'unassigned ' + cp(0x0378, 0x20, 0x2fffd, 0x20, 0xe0080) + ' private ' +
      cp(0xe000, 0x20, 0xf0000, 0x20, 0x10fffd) + ' nonchar ' + cp(0xfdd0, 0x20, 0xffff, 0x20, 0x10ffff) +
      ' specials \ufffd \ufffc \u00adsoft\u00adhyphen word\u2060joiner \u034fcgj \u200d\u200c',
  },

  // --- special-token spellings inside text ---------------------------------------
  { name: 'special_endoftext_alone', text: '<|endoftext|>' },
  {
    name: 'special_gpt_in_text',
    text:
      'Hello<|endoftext|>World <|endoftext|> x<|endofprompt|>y ' +
      '<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>c <|im_start|>user<|im_end|>',
  },
  { name: 'special_sentencepiece', text: '<s>Hello</s> <unk> <s> </s>  <s>  </s><s></s><s>' },
  {
    name: 'special_llama2_chat',
    text: '<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHello [/INST] Hi! </s><s>[INST] Again [/INST]',
  },
  {
    name: 'special_llama3_chat',
    text:
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>' +
      '<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n',
  },
  {
    name: 'special_llama3_reserved',
    text:
      '<|end_of_text|> <|reserved_special_token_0|> <|reserved_special_token_250|> ' +
      '<|finetune_right_pad_id|> <|eom_id|> <|python_tag|> <|reserved_special_token_247|> <|reserved_special_token_251|>',
  },
  {
    name: 'special_chatml_qwen',
    text:
      '<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n' +
      '<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{"name": "f"}\n</tool_call><|im_end|>\n' +
      '<tool_response>ok</tool_response> <|vision_start|><|image_pad|><|vision_end|> <|fim_pad|><|repo_name|><|file_sep|>',
  },
  {
    name: 'special_gemma_chat',
    text:
      '<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi<end_of_turn>\n' +
      '<pad><eos><unk><mask><unused0><unused99> [multimodal] <start_of_image><image_soft_token><end_of_image> [@BOS@] <2mass>',
  },
  {
    name: 'special_mistral',
    text:
      '<s>[INST] Hello [/INST] Hi</s>[INST]x[/INST] [AVAILABLE_TOOLS][/AVAILABLE_TOOLS] ' +
      '[TOOL_CALLS] [TOOL_RESULTS] [/TOOL_RESULTS] <SPECIAL_14> <SPECIAL_999> [IMG] [PREFIX][MIDDLE][SUFFIX] <pad>',
  },
  {
    name: 'special_deepseek',
    text:
      '<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi<｜Assistant｜><think>\n</think>Hello<｜end▁of▁sentence｜> ' +
      '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜> <|EOT|> <｜place▁holder▁no▁0｜> <｜▁pad▁｜>',
  },
  {
    name: 'special_partial',
    text:
      '<|endoftext| <|endoftext |endoftext|> <|endoftext|>> <<|endoftext|> <s <s/> </s </ s> s> ' +
      '<|begin_of_text <|im_start| <start_of_turn <bos <｜begin▁of▁sentence <|im_end|',
  },
  {
    name: 'special_adjacent',
    text:
      '<|endoftext|><|endoftext|><s></s><s><|im_start|><|im_end|><bos><eos>' +
      '<start_of_turn><end_of_turn><|begin_of_text|><|eot_id|><|endoftext|>x<|endoftext|>',
  },
  {
    name: 'special_surrounding_spaces',
    text: ' <|endoftext|> ,  <s>  , \n<|im_start|>\n , \t<bos>\t , x <|eot_id|> y ,   </s>   ',
  },
  { name: 'special_case_variants', text: '<|ENDOFTEXT|> <S> </S> <BOS> <|Im_Start|> [inst] <UNK> <|BEGIN_OF_TEXT|>' },
  {
    name: 'tokenizer_marker_chars',
    text: '▁Hello▁world ▁ ▁▁ hello▁ Ġhello Ċ ĠĠ âĢĻ <0x0A> <0xFF> <0x41>',
  },

  // --- long / control ------------------------------------------------------------
  { name: 'long_word_300', text: LONG_WORD_300 },
  { name: 'long_repeated_char', text: '='.repeat(80) + '\n' + 'a'.repeat(120) + ' ' + '-'.repeat(100) },
  { name: 'nul_alone', text: '\u0000' },
  {
    name: 'nul_and_controls',
    text:
      'a\u0000b \u0000 \u0001\u0002\u0003\u0007\u0008\u000b\u000c\u000e\u001b[31mred\u001b[0m' +
      '\u001f\u007f \u0080\u0085\u009f end\u0000',
  },
];
