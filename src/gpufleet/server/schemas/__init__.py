"""Request and response bodies at the HTTP edge (pydantic), one module an area of the API.

`base` holds what they share: the strictness of request bodies, `Record` (a response read
off a domain record by field name), and the error answers every route can give.
"""
