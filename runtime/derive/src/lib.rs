//! `#[derive(Mobile)]` for graft: structs (named, tuple, unit) and enums of
//! every variant shape, generics included (each type parameter gets a
//! `Mobile` bound).
//!
//! The generated code calls the same `Encoder`/`Decoder`/`Describer` methods
//! a hand-written `graft::graph::Mobile` impl would: for a struct,
//! `begin(name)`, then `field(name)` and the value for each field, then
//! `end()`; for an enum, `variant(index, name)` and, if the variant has
//! fields, the same body. On a decode error, fields decoded so far are handed
//! to `Decoder::bury_err` so that deep partial values are dropped safely.
//!
//! # Which crate the generated code names
//!
//! The impl names the graft crate by path. By default the derive reads the
//! deriving crate's `Cargo.toml` (at `CARGO_MANIFEST_DIR`): a crate that
//! depends on `graft` gets `::graft`, a crate that depends on `graft-otp`
//! alone gets `::graft_otp::graft` (renamed dependencies are followed). A
//! crate that reaches graft some other way (through its own re-export) says
//! where with `#[mobile(crate = path::to::graft)]`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::{parse_macro_input, parse_quote, Data, DeriveInput, Fields, Ident, LitStr};

mod deep;

/// Derives `graft::graph::Mobile`.
///
/// ```ignore
/// #[derive(graft::Mobile)]
/// struct Point { x: i32, y: i32 }
///
/// // In a crate that reaches graft through a re-export of its own:
/// #[derive(my_platform::Mobile)]
/// #[mobile(crate = my_platform::graft)]
/// struct Reading { celsius: f64 }
/// ```
#[proc_macro_derive(Mobile, attributes(mobile))]
pub fn derive_mobile(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    let krate = match crate_path(&input) {
        Ok(k) => k,
        Err(e) => return e.to_compile_error().into(),
    };
    match expand(input) {
        Ok(ts) => retarget(ts, &krate).into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The path to graft: `#[mobile(crate = ..)]`, else found from the manifest.
fn crate_path(input: &DeriveInput) -> syn::Result<TokenStream2> {
    for attr in &input.attrs {
        if !attr.path().is_ident("mobile") {
            continue;
        }
        let mut found = None;
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let path: syn::Path = meta.value()?.parse()?;
                found = Some(quote!(#path));
                Ok(())
            } else {
                Err(meta.error("unknown `mobile` option (expected `crate = path`)"))
            }
        })?;
        if let Some(p) = found {
            return Ok(p);
        }
    }
    Ok(default_crate_path())
}

/// `::graft`, or `::graft_otp::graft` for a crate that depends on graft-otp
/// but not on graft (see the crate docs).
fn default_crate_path() -> TokenStream2 {
    let pkg = std::env::var("CARGO_PKG_NAME").unwrap_or_default();
    let manifest = std::env::var("CARGO_MANIFEST_DIR").ok().and_then(|dir| {
        std::fs::read_to_string(std::path::Path::new(&dir).join("Cargo.toml")).ok()
    });
    let path = match manifest {
        Some(text) if pkg != "graft" => choose_path(&text),
        _ => "::graft".to_string(),
    };
    path.parse().unwrap_or_else(|_| quote!(::graft))
}

/// Picks the path from a manifest's text (a small line scan of the
/// dependency tables: enough for `name = ..`, `name.workspace = true`,
/// `[dependencies.name]` and `package = "..."` renames).
fn choose_path(manifest: &str) -> String {
    let mut graft: Option<(String, bool)> = None; // (key, in [dependencies])
    let mut otp: Option<String> = None;
    let mut table = String::new();
    let mut table_key: Option<String> = None;
    let mut note = |key: &str, package: &str, normal: bool| {
        let ident = key.replace('-', "_");
        match package {
            "graft" if graft.as_ref().is_none_or(|(_, n)| !*n && normal) => {
                graft = Some((ident, normal));
            }
            "graft-otp" => {
                otp.get_or_insert(ident);
            }
            _ => {}
        }
    };
    for raw in manifest.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.starts_with('[') {
            let name = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            table_key = None;
            // `[dependencies.graft]`, `[dev-dependencies.graft-otp]`
            if let Some((t, key)) = name.rsplit_once('.') {
                if t.ends_with("dependencies") {
                    table_key = Some(key.trim_matches('"').to_string());
                    let normal = !t.contains("dev-") && !t.contains("build-");
                    let key = key.trim_matches('"').to_string();
                    note(&key, &key, normal);
                }
            }
            table = name;
            continue;
        }
        if let Some(key) = &table_key {
            if let Some(pkg) = package_of(line) {
                let normal = !table.contains("dev-") && !table.contains("build-");
                note(key, &pkg, normal);
            }
            continue;
        }
        if !table.ends_with("dependencies") {
            continue;
        }
        let normal = !table.contains("dev-") && !table.contains("build-");
        let Some((key, rest)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let key = key
            .split('.')
            .next()
            .unwrap_or(key)
            .trim()
            .trim_matches('"');
        let package = package_of(rest).unwrap_or_else(|| key.to_string());
        note(key, &package, normal);
    }
    match (graft, otp) {
        (Some((key, true)), _) => format!("::{key}"),
        (_, Some(otp)) => format!("::{otp}::graft"),
        (Some((key, false)), None) => format!("::{key}"),
        (None, None) => "::graft".to_string(),
    }
}

/// The `package = "..."` of a dependency line, if it has one.
fn package_of(text: &str) -> Option<String> {
    let at = text.find("package")?;
    let rest = text[at + "package".len()..]
        .trim_start()
        .strip_prefix('=')?;
    let rest = rest.trim_start().strip_prefix('"')?;
    Some(rest.split('"').next()?.to_string())
}

/// Replaces the leading `::graft` of every path in the generated code by
/// `krate` (the expansion is written with `::graft`).
fn retarget(ts: TokenStream2, krate: &TokenStream2) -> TokenStream2 {
    use proc_macro2::{Group, TokenTree};
    if krate.to_string().replace(' ', "") == "::graft" {
        return ts;
    }
    let tokens: Vec<TokenTree> = ts.into_iter().collect();
    let mut out = TokenStream2::new();
    let mut i = 0;
    while i < tokens.len() {
        // `::graft` is three tokens: ':' (joint), ':' (alone), `graft`.
        if let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(id))) =
            (tokens.get(i), tokens.get(i + 1), tokens.get(i + 2))
        {
            // `a::graft::X` (a user's path in a field type) stays; after a
            // keyword (`impl ::graft::..`, `as ::graft::..`) it is ours.
            let preceded_by_path = i > 0
                && matches!(&tokens[i - 1], TokenTree::Ident(p)
                    if !is_keyword(&p.to_string()));
            if a.as_char() == ':' && b.as_char() == ':' && id == "graft" && !preceded_by_path {
                out.extend(krate.clone());
                i += 3;
                continue;
            }
        }
        match &tokens[i] {
            TokenTree::Group(g) => {
                let mut ng = Group::new(g.delimiter(), retarget(g.stream(), krate));
                ng.set_span(g.span());
                out.extend([TokenTree::Group(ng)]);
            }
            t => out.extend([t.clone()]),
        }
        i += 1;
    }
    out
}

/// A keyword that may stand before a path starting with `::` (`crate`,
/// `self`, `super` and `Self` start paths themselves: not here).
fn is_keyword(word: &str) -> bool {
    matches!(
        word,
        "as" | "box"
            | "const"
            | "dyn"
            | "else"
            | "for"
            | "if"
            | "impl"
            | "in"
            | "let"
            | "match"
            | "move"
            | "mut"
            | "pub"
            | "ref"
            | "return"
            | "static"
            | "type"
            | "unsafe"
            | "use"
            | "where"
            | "while"
            | "yield"
    )
}

/// One field: how to name it in text and descriptors, its type, its binding.
struct Field {
    name: String,
    ty: syn::Type,
    member: TokenStream2,
    var: Ident,
}

fn fields_of(fields: &Fields) -> Vec<Field> {
    fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (name, member) = match &f.ident {
                Some(id) => (id.to_string(), quote!(#id)),
                None => {
                    let idx = syn::Index::from(i);
                    (String::new(), quote!(#idx))
                }
            };
            Field {
                name,
                ty: f.ty.clone(),
                member,
                var: format_ident!("__f{}", i),
            }
        })
        .collect()
}

fn wire_min(fields: &[Field]) -> TokenStream2 {
    let tys = fields.iter().map(|f| &f.ty);
    quote!(0usize #(+ <#tys as ::graft::graph::Mobile>::WIRE_MIN)*)
}

fn describe_fields(fields: &[Field]) -> TokenStream2 {
    let calls = fields.iter().map(|f| {
        let name = LitStr::new(&f.name, Span::call_site());
        let ty = &f.ty;
        quote! {
            __d.field(#name);
            __d.describe::<#ty>();
        }
    });
    quote!(#(#calls)*)
}

/// Encodes fields bound to their `var`s (references).
fn encode_fields(fields: &[Field]) -> TokenStream2 {
    let calls = fields.iter().map(|f| {
        let name = LitStr::new(&f.name, Span::call_site());
        let var = &f.var;
        quote! {
            __e.field(#name);
            ::graft::graph::Mobile::encode(#var, __e);
        }
    });
    quote!(#(#calls)*)
}

/// Decodes fields into their `var`s, burying earlier ones on error, then
/// reads `end()` and evaluates `build`.
fn decode_fields(fields: &[Field], build: TokenStream2) -> TokenStream2 {
    let mut out = TokenStream2::new();
    let mut done: Vec<&Ident> = Vec::new();
    for f in fields {
        let name = LitStr::new(&f.name, Span::call_site());
        let ty = &f.ty;
        let var = &f.var;
        out.extend(quote! {
            let #var: #ty = match __d.field(#name).and_then(|()| <#ty as ::graft::graph::Mobile>::decode(__d)) {
                ::core::result::Result::Ok(v) => v,
                ::core::result::Result::Err(e) => return ::core::result::Result::Err(__d.bury_err((#(#done,)*), e)),
            };
        });
        done.push(var);
    }
    out.extend(quote! {
        if let ::core::result::Result::Err(e) = __d.end() {
            return ::core::result::Result::Err(__d.bury_err((#(#done,)*), e));
        }
        ::core::result::Result::Ok(#build)
    });
    out
}

/// `path { member: var, .. }`, `path(var, ..)` or `path`: builds the value
/// from the field variables, or (as a pattern) binds them.
fn with_vars(path: TokenStream2, fields: &Fields, fs: &[Field]) -> TokenStream2 {
    let vars = fs.iter().map(|f| &f.var);
    match fields {
        Fields::Named(_) => {
            let members = fs.iter().map(|f| &f.member);
            quote!(#path { #(#members: #vars),* })
        }
        Fields::Unnamed(_) => quote!(#path ( #(#vars),* )),
        Fields::Unit => path,
    }
}

fn expand(mut input: DeriveInput) -> syn::Result<TokenStream2> {
    let name = input.ident.clone();
    let name_str = LitStr::new(&name.to_string(), Span::call_site());

    // Every type parameter must be Mobile.
    let params: Vec<Ident> = input
        .generics
        .type_params()
        .map(|p| p.ident.clone())
        .collect();
    {
        let wc = input.generics.make_where_clause();
        for p in &params {
            wc.predicates.push(parse_quote!(#p: ::graft::graph::Mobile));
        }
    }
    let (impl_g, ty_g, where_c) = input.generics.split_for_impl();

    let (wire, describe, encode, decode) = match &input.data {
        Data::Struct(s) => {
            let fs = fields_of(&s.fields);
            let wire = wire_min(&fs);
            let desc = describe_fields(&fs);
            let describe = quote! {
                if __d.enter::<Self>("struct", #name_str) {
                    #desc
                    __d.leave();
                }
            };
            let pat = with_vars(quote!(#name), &s.fields, &fs);
            let enc = encode_fields(&fs);
            let encode = quote! {
                let #pat = self;
                __e.begin(#name_str);
                #enc
                __e.end();
            };
            let dec = decode_fields(&fs, pat.clone());
            let decode = quote! {
                __d.begin(#name_str)?;
                #dec
            };
            (wire, describe, encode, decode)
        }
        Data::Enum(en) => {
            let names: Vec<LitStr> = en
                .variants
                .iter()
                .map(|v| LitStr::new(&v.ident.to_string(), Span::call_site()))
                .collect();
            let mut describes = Vec::new();
            let mut enc_arms = Vec::new();
            let mut dec_arms = Vec::new();
            for (i, v) in en.variants.iter().enumerate() {
                let vid = &v.ident;
                let vname = &names[i];
                let idx = i as u32;
                let fs = fields_of(&v.fields);
                let desc = describe_fields(&fs);
                describes.push(quote! {
                    __d.variant(#vname);
                    #desc
                    __d.leave_variant();
                });
                let pat = with_vars(quote!(#name::#vid), &v.fields, &fs);
                let build = pat.clone();
                if fs.is_empty() {
                    enc_arms.push(quote! { #pat => __e.variant(#idx, #vname), });
                    dec_arms.push(quote! { #idx => ::core::result::Result::Ok(#build), });
                } else {
                    let enc = encode_fields(&fs);
                    enc_arms.push(quote! {
                        #pat => {
                            __e.variant(#idx, #vname);
                            __e.begin("");
                            #enc
                            __e.end();
                        }
                    });
                    let dec = decode_fields(&fs, build);
                    dec_arms.push(quote! {
                        #idx => {
                            __d.begin("")?;
                            #dec
                        }
                    });
                }
            }
            let describe = quote! {
                if __d.enter::<Self>("enum", #name_str) {
                    #(#describes)*
                    __d.leave();
                }
            };
            let encode = if en.variants.is_empty() {
                quote!(match *self {})
            } else {
                quote!(match self { #(#enc_arms)* })
            };
            let decode = quote! {
                match __d.variant(&[#(#names),*])? {
                    #(#dec_arms)*
                    _ => ::core::result::Result::Err(__d.invalid(concat!("no variant of ", #name_str))),
                }
            };
            (quote!(1usize), describe, encode, decode)
        }
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span,
                "Mobile cannot be derived for unions",
            ))
        }
    };

    // Recursive types decode on a heap work stack (see `deep.rs`).
    let (shapes, head) = match &input.data {
        Data::Struct(s) => (
            vec![deep::Shape {
                path: quote!(#name),
                fields: &s.fields,
                fs: fields_of(&s.fields),
                begin: Some(name_str.clone()),
            }],
            TokenStream2::new(),
        ),
        Data::Enum(en) => {
            let shapes = en
                .variants
                .iter()
                .map(|v| {
                    let vid = &v.ident;
                    let fs = fields_of(&v.fields);
                    let begin = (!fs.is_empty()).then(|| LitStr::new("", Span::call_site()));
                    deep::Shape {
                        path: quote!(#name::#vid),
                        fields: &v.fields,
                        fs,
                        begin,
                    }
                })
                .collect();
            let names = en
                .variants
                .iter()
                .map(|v| LitStr::new(&v.ident.to_string(), Span::call_site()));
            (shapes, quote!(#(#names),*))
        }
        Data::Union(_) => (Vec::new(), TokenStream2::new()),
    };
    let (partial, decode) = match deep::expand(&input, &shapes, head) {
        Some((def, body)) => (def, body),
        None => (TokenStream2::new(), decode),
    };

    Ok(quote! {
        #partial
        impl #impl_g ::graft::graph::Mobile for #name #ty_g #where_c {
            const WIRE_MIN: usize = #wire;
            fn describe(__d: &mut ::graft::graph::Describer) {
                #describe
            }
            #[allow(unused_variables)]
            fn encode<__F: ::graft::graph::Format>(&self, __e: &mut ::graft::graph::Encoder<'_, __F>) {
                #encode
            }
            #[allow(unused_variables, unreachable_code)]
            fn decode<__S: ::graft::graph::Source>(
                __d: &mut ::graft::graph::Decoder<'_, __S>,
            ) -> ::core::result::Result<Self, ::graft::graph::DecodeError> {
                #decode
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::choose_path;

    #[test]
    fn retargets_only_the_leading_graft_paths() {
        let ts =
            quote::quote!(impl ::graft::A for T { fn f(_: &mut ::graft::B, _: my::graft::C) {} });
        let out = super::retarget(ts, &quote::quote!(::kv::graft)).to_string();
        assert_eq!(out.matches(":: kv :: graft :: A").count(), 1, "{out}");
        assert_eq!(out.matches(":: kv :: graft :: B").count(), 1, "{out}");
        assert!(out.contains("my :: graft :: C"), "{out}");
    }

    #[test]
    fn picks_the_crate_from_the_manifest() {
        let otp_only = "[package]\nname = \"kv\"\n[dependencies]\ngraft-otp = { path = \"../otp\" }\nlog = \"0.4\"\n";
        assert_eq!(choose_path(otp_only), "::graft_otp::graft");
        let both = "[dependencies]\ngraft.workspace = true\ngraft-otp.workspace = true\n";
        assert_eq!(choose_path(both), "::graft");
        let renamed = "[dependencies]\nactors = { package = \"graft-otp\", path = \"x\" }\n";
        assert_eq!(choose_path(renamed), "::actors::graft");
        let table = "[dependencies.graft-otp]\npath = \"x\"\n[dev-dependencies]\ngraft = \"*\"\n";
        assert_eq!(choose_path(table), "::graft_otp::graft");
        assert_eq!(choose_path("[package]\nname = \"x\"\n"), "::graft");
    }
}
